// Package servicerequest is the ServiceRequest aggregate: what a customer
// asked for, before it becomes an order.
package servicerequest

import (
	"fmt"
	"strings"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/text"
	"hearth/domain/uuid"
)

// StreamType names the service-request stream in the event store.
const StreamType = "service_request"

// MaxContent is the longest content, in characters.
const MaxContent = 2000

// Status is where a request is in its life cycle.
type Status string

const (
	StatusNew       Status = "new"
	StatusConfirmed Status = "confirmed"
	StatusConverted Status = "converted"
	StatusCancelled Status = "cancelled"
)

// Statuses lists every status.
var Statuses = []Status{StatusNew, StatusConfirmed, StatusConverted, StatusCancelled}

// ParseStatus checks a status name.
func ParseStatus(s string) (Status, bool) {
	for _, st := range Statuses {
		if string(st) == s {
			return st, true
		}
	}
	return "", false
}

// Final reports whether no change can follow this status.
func (s Status) Final() bool { return s == StatusConverted || s == StatusCancelled }

// Sources a request can come from.
var Sources = []string{"phone", "web", "walk_in", "manual"}

// Created starts a request's stream.
type Created struct {
	RequestID          string     `json:"request_id"`
	CustomerID         string     `json:"customer_id"`
	CatalogItemID      string     `json:"catalog_item_id,omitempty"`
	Content            string     `json:"content"`
	AppointmentStartAt *time.Time `json:"appointment_start_at,omitempty"`
	AppointmentEndAt   *time.Time `json:"appointment_end_at,omitempty"`
	Source             string     `json:"source"`
	Notes              string     `json:"notes"`
	Status             Status     `json:"status"`
	event.Erasure
}

// DetailsUpdated carries the new details, all of them.
type DetailsUpdated struct {
	CatalogItemID      string     `json:"catalog_item_id,omitempty"`
	Content            string     `json:"content"`
	AppointmentStartAt *time.Time `json:"appointment_start_at,omitempty"`
	AppointmentEndAt   *time.Time `json:"appointment_end_at,omitempty"`
	Notes              string     `json:"notes"`
	event.Erasure
}

// StatusChanged moves the request to confirmed or cancelled.
type StatusChanged struct {
	From Status `json:"from"`
	To   Status `json:"to"`
}

// Converted records the order the request became.
type Converted struct {
	OrderID string `json:"order_id"`
}

func (Created) EventType() string        { return "ServiceRequestCreated" }
func (DetailsUpdated) EventType() string { return "ServiceRequestDetailsUpdated" }
func (StatusChanged) EventType() string  { return "ServiceRequestStatusChanged" }
func (Converted) EventType() string      { return "ServiceRequestConverted" }

// The checks of the values every stored event of each type carries
// (event.Checker): ids, source, statuses; personal fields never.

func (e Created) Check() error {
	return event.Require(event.Has("request_id", e.RequestID != ""), event.Has("customer_id", e.CustomerID != ""),
		event.Has("source", e.Source != ""), event.Has("status", e.Status != ""))
}
func (e StatusChanged) Check() error {
	return event.Require(event.Has("from", e.From != ""), event.Has("to", e.To != ""))
}
func (e Converted) Check() error { return event.Require(event.Has("order_id", e.OrderID != "")) }

// EventTypes returns the stored type names of its events, sorted.
func EventTypes() []string { return registry.Types() }

// Decode turns a stored request event back into its type.
func Decode(eventType string, data []byte, more ...[]byte) (event.Event, error) {
	return registry.Decode(eventType, data, more...)
}

// Personal names, by stored event type, the fields that hold personal data
// of the request's customer: sealed at rest with the customer's data key
// (adapters/vault), erased with the customer.
var Personal = map[string][]string{
	"ServiceRequestCreated":        {"content", "notes"},
	"ServiceRequestDetailsUpdated": {"content", "notes"},
}

var registry = event.Registry{
	event.PersonalDataErasedType:   event.As[event.PersonalDataErased],
	"ServiceRequestCreated":        event.As[Created],
	"ServiceRequestDetailsUpdated": event.As[DetailsUpdated],
	"ServiceRequestStatusChanged":  event.As[StatusChanged],
	"ServiceRequestConverted":      event.As[Converted],
}

// InvalidTransitionError is a status change the life cycle does not allow.
type InvalidTransitionError = apperr.TransitionError[Status]

func invalidTransition(from, to Status) error {
	return &InvalidTransitionError{Aggregate: "service_request", From: from, To: to}
}

// Details are what DetailsUpdated carries.
type Details struct {
	CatalogItemID      string
	Content            string
	AppointmentStartAt *time.Time
	AppointmentEndAt   *time.Time
	Notes              string
}

func (d Details) normalized() Details {
	d.Content = strings.TrimSpace(d.Content)
	d.AppointmentStartAt, d.AppointmentEndAt = event.InstantPtr(d.AppointmentStartAt), event.InstantPtr(d.AppointmentEndAt)
	return d
}

func (d Details) check(errs *apperr.Fields) {
	if d.CatalogItemID != "" && !uuid.Valid(d.CatalogItemID) {
		errs.Add("catalog_item_id", "must be a UUID")
	}
	if d.Content == "" {
		errs.Add("content", "is required")
	} else if n := len([]rune(d.Content)); n > MaxContent {
		errs.Add("content", "must be at most %d characters, got %d", MaxContent, n)
	}
	if d.AppointmentStartAt != nil && d.AppointmentEndAt != nil && d.AppointmentEndAt.Before(*d.AppointmentStartAt) {
		errs.Add("appointment_end_at", "must not be before appointment_start_at")
	}
	if n := len([]rune(d.Notes)); n > 2000 {
		errs.Add("notes", "must be at most 2000 characters, got %d", n)
	}
	text.Lines(errs, "content", d.Content)
	text.Lines(errs, "notes", d.Notes)
}

func (d Details) equal(e Details) bool {
	same := func(a, b *time.Time) bool { return (a == nil && b == nil) || (a != nil && b != nil && a.Equal(*b)) }
	return d.CatalogItemID == e.CatalogItemID && d.Content == e.Content && d.Notes == e.Notes &&
		same(d.AppointmentStartAt, e.AppointmentStartAt) && same(d.AppointmentEndAt, e.AppointmentEndAt)
}

// Request is the aggregate.
type Request struct {
	id         string
	customerID string
	details    Details
	status     Status
	orderID    string

	version int
	changes []event.Event
}

// New decides a new request.
func New(id, customerID, source string, d Details) (*Request, error) {
	d = d.normalized()
	var errs apperr.Fields
	if customerID == "" {
		errs.Add("customer_id", "is required")
	} else if !uuid.Valid(customerID) {
		errs.Add("customer_id", "must be a UUID")
	}
	okSource := false
	for _, s := range Sources {
		okSource = okSource || s == source
	}
	if !okSource {
		errs.Add("source", "must be one of %s", strings.Join(Sources, ", "))
	}
	d.check(&errs)
	if err := errs.Err(); err != nil {
		return nil, err
	}
	r := &Request{}
	r.record(Created{RequestID: id, CustomerID: customerID, CatalogItemID: d.CatalogItemID, Content: d.Content,
		AppointmentStartAt: d.AppointmentStartAt, AppointmentEndAt: d.AppointmentEndAt, Source: source,
		Notes: d.Notes, Status: StatusNew})
	return r, nil
}

// Rehydrate rebuilds a request from its stored events.
func Rehydrate(events []event.Event) (*Request, error) {
	r := &Request{}
	for i, e := range events {
		if _, ok := e.(Created); i == 0 && !ok {
			return nil, fmt.Errorf("service request stream starts with %s, not ServiceRequestCreated", e.EventType())
		}
		r.apply(e)
		r.version++
	}
	return r, nil
}

func (r *Request) ID() string             { return r.id }
func (r *Request) CustomerID() string     { return r.customerID }
func (r *Request) Details() Details       { return r.details }
func (r *Request) Status() Status         { return r.status }
func (r *Request) Version() int           { return r.version }
func (r *Request) Changes() []event.Event { return r.changes }

// UpdateDetails changes the details; not allowed once final. Details equal
// to the request's change nothing and are not checked again: an erased
// customer's request reads with its content empty, which no client wrote.
func (r *Request) UpdateDetails(d Details) error {
	d = d.normalized()
	if d.equal(r.details) {
		return nil
	}
	var errs apperr.Fields
	d.check(&errs)
	if err := errs.Err(); err != nil {
		return err
	}
	if r.status.Final() {
		return &apperr.RuleError{Rule: "service_request.final", Detail: fmt.Sprintf("cannot update details: the request is %s", r.status)}
	}
	r.record(DetailsUpdated{CatalogItemID: d.CatalogItemID, Content: d.Content,
		AppointmentStartAt: d.AppointmentStartAt, AppointmentEndAt: d.AppointmentEndAt, Notes: d.Notes})
	return nil
}

// MaxEvents bounds the events a request's edits may take it to: a request
// is loaded whole for every command on it, so a client editing one in a
// loop must not grow it without end. Its status changes and conversion
// stay allowed past the bound (each happens once).
const MaxEvents = 200

// RuleTooManyEvents is broken by an edit of a request that has MaxEvents
// events.
const RuleTooManyEvents = "service_request.too_many_events"

// CheckGrowth refuses the details changes decided since loading when they
// take the request past MaxEvents.
func (r *Request) CheckGrowth() error {
	if r.version+len(r.changes) <= MaxEvents {
		return nil
	}
	for _, e := range r.changes {
		if _, ok := e.(DetailsUpdated); ok {
			return &apperr.RuleError{Rule: RuleTooManyEvents, Detail: fmt.Sprintf(
				"the request has %d events, the most its edits may take it to: it can still be confirmed, converted or cancelled; create a new request for further changes",
				r.version)}
		}
	}
	return nil
}

// RuleConvertOnlyByConversion is broken by a status change to converted: a
// request is converted only by Convert, which creates its order. The name
// is part of the API (its problem documents' "rule") and stays as it was.
const RuleConvertOnlyByConversion = "service_request.convert_via_endpoint"

// ChangeStatus confirms or cancels the request. Conversion goes through
// Convert.
func (r *Request) ChangeStatus(to Status) error {
	if to == r.status {
		return nil
	}
	switch {
	case to == StatusConverted:
		return &apperr.RuleError{Rule: RuleConvertOnlyByConversion,
			Detail: "a request becomes converted only by its conversion into an order (Convert), not by a status change"}
	case to == StatusConfirmed && r.status == StatusNew,
		to == StatusCancelled && (r.status == StatusNew || r.status == StatusConfirmed):
		r.record(StatusChanged{From: r.status, To: to})
		return nil
	}
	return invalidTransition(r.status, to)
}

// Convert records the order the request became; only from confirmed.
func (r *Request) Convert(orderID string) error {
	if r.status != StatusConfirmed {
		return &apperr.RuleError{Rule: "service_request.not_confirmed",
			Detail: fmt.Sprintf("only a confirmed request can be converted; it is %s", r.status)}
	}
	r.record(Converted{OrderID: orderID})
	return nil
}

func (r *Request) record(e event.Event) {
	r.apply(e)
	r.changes = append(r.changes, e)
}

func (r *Request) apply(e event.Event) {
	switch e := e.(type) {
	case Created:
		r.id, r.customerID, r.status = e.RequestID, e.CustomerID, e.Status
		r.details = Details{CatalogItemID: e.CatalogItemID, Content: e.Content,
			AppointmentStartAt: e.AppointmentStartAt, AppointmentEndAt: e.AppointmentEndAt, Notes: e.Notes}
	case DetailsUpdated:
		r.details = Details{CatalogItemID: e.CatalogItemID, Content: e.Content,
			AppointmentStartAt: e.AppointmentStartAt, AppointmentEndAt: e.AppointmentEndAt, Notes: e.Notes}
	case StatusChanged:
		r.status = e.To
	case Converted:
		r.status, r.orderID = StatusConverted, e.OrderID
	}
}
