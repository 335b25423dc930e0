package event

import "slices"

// Erasure is embedded in every event type that carries personal data (free
// text people write about a customer). Stored events never hold it: the
// one decoder that opens sealed fields (adapters/vault) sets it when the
// data subject was erased, naming the fields that read as erased (empty)
// for that reason, so that views, the feed and webhooks can show them as
// erased rather than as empty.
type Erasure struct {
	ErasedFields []string `json:"erased,omitempty"`
}

// Erased reports whether field (its JSON name in the stored event) was
// erased.
func (e Erasure) Erased(field string) bool { return slices.Contains(e.ErasedFields, field) }

// Subject types: whose personal data an event's sealed fields are.
const (
	SubjectCustomer    = "customer"
	SubjectStaffMember = "staff_member"
)

// PersonalDataErasedType is the stored type of PersonalDataErased.
const PersonalDataErasedType = "PersonalDataErased"

// PersonalDataErased is appended to every stream that holds personal data
// of a subject when an operator erases the subject. It changes no state of
// the aggregate; its place in the stream tells each consumer that the
// events before it must now read as erased (the read models re-fold the
// stream, so that their rows and change log forget the erased fields).
type PersonalDataErased struct {
	SubjectType string `json:"subject_type"`
	SubjectID   string `json:"subject_id"`
}

// EventType implements Event.
func (PersonalDataErased) EventType() string { return PersonalDataErasedType }

// Check implements Checker.
func (e PersonalDataErased) Check() error {
	return Require(Has("subject_type", e.SubjectType != ""), Has("subject_id", e.SubjectID != ""))
}

// SubjectStreamType is the stream type of data subjects' own streams: one
// per erased subject, its id the subject's, holding SubjectErased (the
// public customer.erased or staff_member.erased).
const SubjectStreamType = "data_subject"

// SubjectErasedType is the stored type of SubjectErased.
const SubjectErasedType = "SubjectErased"

// SubjectErased records that an operator erased a data subject: everything
// Hearth held about them reads as erased from then on.
type SubjectErased struct {
	SubjectType string `json:"subject_type"`
	SubjectID   string `json:"subject_id"`
}

// EventType implements Event.
func (SubjectErased) EventType() string { return SubjectErasedType }

// Check implements Checker.
func (e SubjectErased) Check() error {
	return Require(Has("subject_type", e.SubjectType != ""), Has("subject_id", e.SubjectID != ""))
}

// DecodeSubject decodes the events of data subjects' streams.
func DecodeSubject(eventType string, data []byte, more ...[]byte) (Event, error) {
	return subjectRegistry.Decode(eventType, data, more...)
}

var subjectRegistry = Registry{SubjectErasedType: As[SubjectErased]}
