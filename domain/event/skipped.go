package event

// SkippedType is the type (and change-log action) of an event an operator
// chose to skip.
const SkippedType = "skipped"

// Skipped stands in for an event an operator chose to skip: every view
// folds it as a version bump that changes no field but updated_at, so the
// row moves past the event and the next one follows it. Projections and
// verification substitute it for the skipped event in the same way, so
// they agree.
type Skipped struct {
	// Of is the type of the skipped event.
	Of string `json:"of"`
}

// EventType implements Event.
func (Skipped) EventType() string { return SkippedType }

// Skip returns r as skipped: the same envelope (id, stream, version,
// merchant, time), type SkippedType, and a Skipped payload.
func Skip(r Recorded) Recorded {
	of := r.Type
	if s, ok := r.Event.(Skipped); ok {
		of = s.Of
	}
	r.Type = SkippedType
	r.Event = Skipped{Of: of}
	return r
}
