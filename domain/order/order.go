// Package order is the Order aggregate: its statuses, rules and events.
//
// An Order is rebuilt from its events (Rehydrate) and decides new ones
// (UpdateDetails, ChangeStatus, ...). A decision that would change nothing
// records nothing; one that breaks a rule returns an error and records
// nothing. Recorded events are read with Changes and appended by the caller
// at Version()+1 onwards.
package order

import (
	"fmt"
	"strings"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/schedule"
	"hearth/domain/text"
	"hearth/domain/uuid"
)

// Status is where an order is in its life cycle.
type Status string

const (
	StatusPending     Status = "pending"
	StatusConfirmed   Status = "confirmed"
	StatusDispatching Status = "dispatching"
	StatusInService   Status = "in_service"
	StatusCompleted   Status = "completed"
	StatusCancelled   Status = "cancelled"
)

// Statuses lists every status, in life-cycle order.
var Statuses = []Status{StatusPending, StatusConfirmed, StatusDispatching, StatusInService, StatusCompleted, StatusCancelled}

var transitions = map[Status][]Status{
	StatusPending:     {StatusConfirmed, StatusDispatching, StatusInService},
	StatusConfirmed:   {StatusDispatching, StatusInService},
	StatusDispatching: {StatusConfirmed, StatusInService},
	StatusInService:   {StatusCompleted},
}

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
func (s Status) Final() bool { return s == StatusCompleted || s == StatusCancelled }

// CanMoveTo reports whether the life cycle allows s -> to (cancellation is a
// separate command and is not included).
func (s Status) CanMoveTo(to Status) bool {
	for _, t := range transitions[s] {
		if t == to {
			return true
		}
	}
	return false
}

// SettlementStatus says whether the order has been paid for.
type SettlementStatus string

const (
	Unsettled SettlementStatus = "unsettled"
	Settled   SettlementStatus = "settled"
)

// InvalidTransitionError is a status change the life cycle does not allow.
type InvalidTransitionError = apperr.TransitionError[Status]

func invalidTransition(from, to Status) error {
	return &InvalidTransitionError{Aggregate: "order", From: from, To: to}
}

// Order is the aggregate. Its fields are what decisions need.
type Order struct {
	id          string
	requestID   string
	customerID  string
	amountCents int64
	notes       string
	status      Status

	staffID      string
	startAt      *time.Time
	endAt        *time.Time
	dispatchNote string

	settlement Settlement
	// settles is set when the changes since loading mark an unsettled order
	// settled: a payment recorded, which CheckGrowth lets past MaxEvents.
	settles bool

	version int
	changes []event.Event
}

// NewOrder is the input of New.
type NewOrder struct {
	ID               string
	RequestID        string
	CustomerID       string
	AmountCents      int64
	Notes            string
	ScheduledStartAt *time.Time
	ScheduledEndAt   *time.Time
	// PlanID and VisitDate (YYYY-MM-DD) name the service plan visit the
	// order is generated for, if any.
	PlanID, VisitDate string
}

// Limits on free text, in characters.
const (
	MaxNotes  = 2000
	MaxReason = 500
)

// MaxEvents bounds the events an order's edits may take it to (its
// details, settlement, assignment and status changes other than into
// service, completed or cancelled): an order is loaded whole for every
// command on it, and its change log is answered whole, so a client editing
// one order in a loop must not grow it without end. Taking it into service,
// completing and cancelling it stay allowed past the bound, and so does
// marking it settled while it is unsettled (a payment received is recorded
// whatever the order went through): each happens once, since the way back
// (another status, unsettled) is an edit the bound refuses, so an order
// that reached it can still be finished and paid.
const MaxEvents = 200

// RuleTooManyEvents is broken by an edit of an order that has MaxEvents
// events.
const RuleTooManyEvents = "order.too_many_events"

// CheckGrowth refuses the changes decided since loading when they take the
// order past MaxEvents, unless they take it into service or end it. The
// use cases of the API's edits call it; the visit generator's re-plans of
// its orders do not (they are bounded by the plan's changes and moves).
func (o *Order) CheckGrowth() error {
	if len(o.changes) == 0 || o.version+len(o.changes) <= MaxEvents {
		return nil
	}
	if o.settles {
		return nil
	}
	for _, e := range o.changes {
		switch e := e.(type) {
		case Cancelled:
			return nil
		case StatusChanged:
			if e.To == StatusInService || e.To == StatusCompleted {
				return nil
			}
		}
	}
	return &apperr.RuleError{Rule: RuleTooManyEvents, Detail: fmt.Sprintf(
		"the order has %d events, the most its edits may take it to: it can still be taken into service, completed or cancelled; create a new order for further changes",
		o.version)}
}

// New decides a new order and records OrderCreated.
func New(in NewOrder) (*Order, error) {
	var errs apperr.Fields
	if !uuid.Valid(in.ID) {
		errs.Add("id", "must be a UUID")
	}
	if in.RequestID != "" && !uuid.Valid(in.RequestID) {
		errs.Add("request_id", "must be a UUID")
	}
	if in.PlanID != "" && !uuid.Valid(in.PlanID) {
		errs.Add("plan_id", "must be a UUID")
	}
	checkDetails(&errs, Details{CustomerID: in.CustomerID, AmountCents: in.AmountCents, Notes: in.Notes})
	if (in.ScheduledStartAt == nil) != (in.ScheduledEndAt == nil) {
		errs.Add("scheduled_end_at", "scheduled_start_at and scheduled_end_at go together")
	} else if in.ScheduledStartAt != nil && in.ScheduledEndAt.Before(*in.ScheduledStartAt) {
		errs.Add("scheduled_end_at", "must not be before scheduled_start_at")
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	o := &Order{}
	o.record(Created{
		OrderID:          in.ID,
		RequestID:        in.RequestID,
		CustomerID:       in.CustomerID,
		AmountCents:      in.AmountCents,
		Notes:            in.Notes,
		ScheduledStartAt: event.InstantPtr(in.ScheduledStartAt),
		ScheduledEndAt:   event.InstantPtr(in.ScheduledEndAt),
		Status:           StatusPending,
		PlanID:           in.PlanID,
		VisitDate:        in.VisitDate,
	})
	return o, nil
}

// Rehydrate rebuilds an order from its stored events, in version order.
func Rehydrate(events []event.Event) (*Order, error) {
	o := &Order{}
	for i, e := range events {
		if i == 0 {
			if _, ok := e.(Created); !ok {
				return nil, fmt.Errorf("order stream starts with %s, not OrderCreated", e.EventType())
			}
		}
		o.apply(e)
		o.version++
	}
	return o, nil
}

// ID returns the order's id.
func (o *Order) ID() string { return o.id }

// Status returns the current status.
func (o *Order) Status() Status { return o.status }

// CustomerID returns the ordering customer.
func (o *Order) CustomerID() string { return o.customerID }

// RequestID is the service request the order came from ("" when none).
func (o *Order) RequestID() string { return o.requestID }

// Version returns the stream version the order was loaded at (0 for a new
// order): changes are appended from Version()+1.
func (o *Order) Version() int { return o.version }

// Changes returns the events decided since loading.
func (o *Order) Changes() []event.Event { return o.changes }

// Details are the fields OrderDetailsUpdated carries.
type Details struct {
	CustomerID  string
	AmountCents int64
	Notes       string
}

func checkDetails(errs *apperr.Fields, d Details) {
	if d.CustomerID == "" {
		errs.Add("customer_id", "is required")
	} else if !uuid.Valid(d.CustomerID) {
		errs.Add("customer_id", "must be a UUID")
	}
	if d.AmountCents < 0 {
		errs.Add("amount_cents", "must be >= 0")
	}
	if n := len([]rune(d.Notes)); n > MaxNotes {
		errs.Add("notes", "must be at most %d characters, got %d", MaxNotes, n)
	}
	text.Lines(errs, "notes", d.Notes)
}

// Details returns the current details.
func (o *Order) Details() Details {
	return Details{CustomerID: o.customerID, AmountCents: o.amountCents, Notes: o.notes}
}

// UpdateDetails changes customer, amount and notes; not allowed once final.
func (o *Order) UpdateDetails(d Details) error {
	var errs apperr.Fields
	checkDetails(&errs, d)
	if err := errs.Err(); err != nil {
		return err
	}
	if d == o.Details() {
		return nil
	}
	if o.status.Final() {
		return o.finalError("update details")
	}
	o.record(DetailsUpdated{CustomerID: d.CustomerID, AmountCents: d.AmountCents, Notes: d.Notes})
	return nil
}

// RuleCancelNeedsReason is broken by a status change to cancelled: an order
// is cancelled only through Cancel, which records a reason.
const RuleCancelNeedsReason = "order.cancel_needs_reason"

// ChangeStatus moves the order to status to. Cancellation goes through
// Cancel, which needs a reason.
func (o *Order) ChangeStatus(to Status, now time.Time) error {
	if to == o.status {
		return nil
	}
	if to == StatusCancelled {
		return &apperr.RuleError{Rule: RuleCancelNeedsReason, Detail: "an order is cancelled with a reason (Cancel), not by a status change"}
	}
	if !o.status.CanMoveTo(to) {
		return invalidTransition(o.status, to)
	}
	ev := StatusChanged{From: o.status, To: to}
	if to == StatusCompleted {
		ev.CompletedAt = event.InstantPtr(&now)
	}
	o.record(ev)
	return nil
}

// Cancel ends the order with a non-empty reason; not allowed once final.
// Cancelling a cancelled order again changes nothing.
func (o *Order) Cancel(reason string) error {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return apperr.Invalid("reason", "is required")
	}
	if n := len([]rune(reason)); n > MaxReason {
		return apperr.Invalid("reason", "must be at most %d characters, got %d", MaxReason, n)
	}
	if p := text.Problem(reason, true); p != "" {
		return apperr.Invalid("reason", "%s", p)
	}
	if o.status == StatusCancelled {
		return nil
	}
	if o.status.Final() {
		return invalidTransition(o.status, StatusCancelled)
	}
	o.record(Cancelled{From: o.status, Reason: reason})
	return nil
}

// Assignment is who goes and when.
type Assignment struct {
	StaffID      string
	StartAt      time.Time
	EndAt        time.Time
	DispatchNote string
}

// Validate checks the assignment fields.
func (o Assignment) Validate() error {
	var errs apperr.Fields
	schedule.Window{StaffID: o.StaffID, StartAt: o.StartAt, EndAt: o.EndAt}.Check(&errs)
	if n := len([]rune(o.DispatchNote)); n > MaxNotes {
		errs.Add("dispatch_note", "must be at most %d characters, got %d", MaxNotes, n)
	}
	text.Lines(&errs, "dispatch_note", o.DispatchNote)
	return errs.Err()
}

// Assign sets the staff member and window (only while pending, confirmed or
// dispatching) and moves a pending or confirmed order to dispatching. The
// assignment the order has already, restated, changes nothing in any of
// those statuses past confirmed (Restates).
func (o *Order) Assign(a Assignment) error {
	if err := a.Validate(); err != nil {
		return err
	}
	a.StartAt, a.EndAt = event.Instant(a.StartAt), event.Instant(a.EndAt)
	if o.Restates(a) {
		return nil
	}
	switch o.status {
	case StatusPending, StatusConfirmed, StatusDispatching:
	default:
		return &apperr.RuleError{Rule: "order.assignment_not_allowed",
			Detail: fmt.Sprintf("an order can be assigned only while pending, confirmed or dispatching; it is %s", o.status)}
	}
	if a != o.Assignment() {
		o.record(AssignmentUpdated{StaffID: a.StaffID, StartAt: &a.StartAt, EndAt: &a.EndAt, DispatchNote: a.DispatchNote})
	}
	if o.status != StatusDispatching {
		o.record(StatusChanged{From: o.status, To: StatusDispatching})
	}
	return nil
}

// Restates reports whether Assign(a) would change nothing: the order has
// assignment a already and is dispatching, or past it (in service,
// completed, or cancelled, which keeps the staff member it had). A PUT sent
// again after the worker started the job is such a restatement: it
// succeeds, as every command that changes nothing does, rather than be
// refused for a change it does not ask for.
func (o *Order) Restates(a Assignment) bool {
	a.StartAt, a.EndAt = event.Instant(a.StartAt), event.Instant(a.EndAt)
	if a.StaffID == "" || a != o.Assignment() {
		return false
	}
	switch o.status {
	case StatusDispatching, StatusInService, StatusCompleted, StatusCancelled:
		return true
	}
	return false
}

// Assignment returns the current assignment (zero when unassigned).
func (o *Order) Assignment() Assignment {
	if o.staffID == "" || o.startAt == nil || o.endAt == nil {
		return Assignment{}
	}
	return Assignment{StaffID: o.staffID, StartAt: *o.startAt, EndAt: *o.endAt, DispatchNote: o.dispatchNote}
}

// Unassign is the order's side of a cancelled schedule: the order loses its
// staff member and dispatch note (its window stays) and returns to
// confirmed, from dispatching or in service. A final order is left alone.
func (o *Order) Unassign() {
	if o.status.Final() {
		return
	}
	if o.staffID != "" || o.dispatchNote != "" {
		o.record(AssignmentUpdated{})
	}
	if o.status != StatusConfirmed {
		o.record(StatusChanged{From: o.status, To: StatusConfirmed})
	}
}

// FollowSchedule is the order's side of a schedule status change: in
// service moves the order to in_service, done completes it. It is a no-op
// when the order is already there.
func (o *Order) FollowSchedule(to Status, now time.Time) error {
	if o.status == to {
		return nil
	}
	return o.ChangeStatus(to, now)
}

// Settlement is the payment state of an order.
type Settlement struct {
	Status          SettlementStatus
	PaidAmountCents int64
	PaymentMethod   string
	PaidAt          *time.Time
	Note            string
}

func (s Settlement) equal(t Settlement) bool {
	samePaidAt := (s.PaidAt == nil && t.PaidAt == nil) ||
		(s.PaidAt != nil && t.PaidAt != nil && s.PaidAt.Equal(*t.PaidAt))
	return s.Status == t.Status && s.PaidAmountCents == t.PaidAmountCents &&
		s.PaymentMethod == t.PaymentMethod && s.Note == t.Note && samePaidAt
}

// Settle records the payment state. It is allowed in every status, since a
// cancelled order may still have to be refunded or written off.
func (o *Order) Settle(s Settlement) error {
	var errs apperr.Fields
	if s.Status != Unsettled && s.Status != Settled {
		errs.Add("settlement_status", "must be unsettled or settled")
	}
	if s.PaidAmountCents < 0 {
		errs.Add("paid_amount_cents", "must be >= 0")
	}
	if len([]rune(s.PaymentMethod)) > 100 {
		errs.Add("payment_method", "must be at most 100 characters")
	}
	text.Line(&errs, "payment_method", s.PaymentMethod)
	if n := len([]rune(s.Note)); n > MaxNotes {
		errs.Add("settlement_note", "must be at most %d characters, got %d", MaxNotes, n)
	}
	text.Lines(&errs, "settlement_note", s.Note)
	if err := errs.Err(); err != nil {
		return err
	}
	s.PaidAt = event.InstantPtr(s.PaidAt)
	if s.equal(o.settlement) {
		return nil
	}
	o.settles = o.settles || (o.settlement.Status == Unsettled && s.Status == Settled)
	o.record(SettlementUpdated{
		SettlementStatus: s.Status, PaidAmountCents: s.PaidAmountCents,
		PaymentMethod: s.PaymentMethod, PaidAt: s.PaidAt, SettlementNote: s.Note,
	})
	return nil
}

func (o *Order) finalError(action string) error {
	return &apperr.RuleError{Rule: "order.final", Detail: fmt.Sprintf("cannot %s: the order is %s", action, o.status)}
}

func (o *Order) record(e event.Event) {
	o.apply(e)
	o.changes = append(o.changes, e)
}

func (o *Order) apply(e event.Event) {
	switch e := e.(type) {
	case Created:
		o.id, o.customerID, o.amountCents, o.notes, o.status = e.OrderID, e.CustomerID, e.AmountCents, e.Notes, e.Status
		o.requestID = e.RequestID
		o.startAt, o.endAt = e.ScheduledStartAt, e.ScheduledEndAt
		o.settlement = Settlement{Status: Unsettled}
	case DetailsUpdated:
		o.customerID, o.amountCents, o.notes = e.CustomerID, e.AmountCents, e.Notes
	case StatusChanged:
		o.status = e.To
	case Cancelled:
		o.status = StatusCancelled
	case AssignmentUpdated:
		o.staffID, o.dispatchNote = e.StaffID, e.DispatchNote
		if e.StartAt != nil {
			o.startAt, o.endAt = e.StartAt, e.EndAt
		}
	case SettlementUpdated:
		o.settlement = Settlement{Status: e.SettlementStatus, PaidAmountCents: e.PaidAmountCents,
			PaymentMethod: e.PaymentMethod, PaidAt: e.PaidAt, Note: e.SettlementNote}
	}
}
