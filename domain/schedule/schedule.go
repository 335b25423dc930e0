// Package schedule is the Schedule aggregate: who goes to an order, and
// when. An order has at most one live (planned or in service) schedule; a
// staff member never has two live schedules whose windows overlap (enforced
// by the write side's bookings, not here).
package schedule

import (
	"fmt"
	"slices"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/uuid"
)

// StreamType names the schedule stream in the event store.
const StreamType = "schedule"

// Status is where a schedule is in its life cycle.
type Status string

const (
	StatusPlanned   Status = "planned"
	StatusInService Status = "in_service"
	StatusDone      Status = "done"
	StatusCancelled Status = "cancelled"
)

// Statuses lists every status.
var Statuses = []Status{StatusPlanned, StatusInService, StatusDone, StatusCancelled}

var transitions = map[Status][]Status{
	StatusPlanned:   {StatusInService, StatusCancelled},
	StatusInService: {StatusDone, StatusCancelled},
}

// CanMoveTo reports whether the life cycle allows s -> to.
func (s Status) CanMoveTo(to Status) bool { return slices.Contains(transitions[s], to) }

// ParseStatus checks a status name.
func ParseStatus(s string) (Status, bool) {
	for _, st := range Statuses {
		if string(st) == s {
			return st, true
		}
	}
	return "", false
}

// Live reports whether the schedule still holds its staff member's time.
func (s Status) Live() bool { return s == StatusPlanned || s == StatusInService }

// Created starts a schedule's stream.
type Created struct {
	ScheduleID string `json:"schedule_id"`
	OrderID    string `json:"order_id"`
	// CustomerID is the order's customer, whose data key seals Notes.
	// Schedules created before it was recorded have none: the protect
	// command (app protect) finds it from the order.
	CustomerID string    `json:"customer_id,omitempty"`
	StaffID    string    `json:"staff_id"`
	StartAt    time.Time `json:"start_at"`
	EndAt      time.Time `json:"end_at"`
	Notes      string    `json:"notes"`
	Status     Status    `json:"status"`
	event.Erasure
}

// AssignmentUpdated moves a planned schedule to another staff member or
// window.
type AssignmentUpdated struct {
	StaffID string    `json:"staff_id"`
	StartAt time.Time `json:"start_at"`
	EndAt   time.Time `json:"end_at"`
}

// StatusChanged moves the schedule along its life cycle.
type StatusChanged struct {
	From Status `json:"from"`
	To   Status `json:"to"`
}

func (Created) EventType() string           { return "ScheduleCreated" }
func (AssignmentUpdated) EventType() string { return "ScheduleAssignmentUpdated" }
func (StatusChanged) EventType() string     { return "ScheduleStatusChanged" }

// The checks of the values every stored event of each type carries
// (event.Checker): ids, times, statuses; personal fields never.

func (e Created) Check() error {
	return event.Require(event.Has("schedule_id", e.ScheduleID != ""), event.Has("order_id", e.OrderID != ""),
		event.Has("staff_id", e.StaffID != ""), event.Has("start_at", !e.StartAt.IsZero()),
		event.Has("end_at", !e.EndAt.IsZero()), event.Has("status", e.Status != ""))
}
func (e AssignmentUpdated) Check() error {
	return event.Require(event.Has("staff_id", e.StaffID != ""), event.Has("start_at", !e.StartAt.IsZero()),
		event.Has("end_at", !e.EndAt.IsZero()))
}
func (e StatusChanged) Check() error {
	return event.Require(event.Has("from", e.From != ""), event.Has("to", e.To != ""))
}

// EventTypes returns the stored type names of its events, sorted.
func EventTypes() []string { return registry.Types() }

// Decode turns a stored schedule event back into its type.
func Decode(eventType string, data []byte, more ...[]byte) (event.Event, error) {
	return registry.Decode(eventType, data, more...)
}

// Personal names, by stored event type, the fields that hold personal data
// of the customer of the schedule's order: sealed at rest with the
// customer's data key (adapters/vault), erased with the customer.
var Personal = map[string][]string{"ScheduleCreated": {"notes"}}

var registry = event.Registry{
	event.PersonalDataErasedType: event.As[event.PersonalDataErased],
	"ScheduleCreated":            event.As[Created],
	"ScheduleAssignmentUpdated":  event.As[AssignmentUpdated],
	"ScheduleStatusChanged":      event.As[StatusChanged],
}

// InvalidTransitionError is a status change the life cycle does not allow.
type InvalidTransitionError = apperr.TransitionError[Status]

func invalidTransition(from, to Status) error {
	return &InvalidTransitionError{Aggregate: "schedule", From: from, To: to}
}

// Window is who goes, and when (half-open: [StartAt, EndAt)).
type Window struct {
	StaffID string
	StartAt time.Time
	EndAt   time.Time
}

// Validate checks the window fields.
func (w Window) Validate() error {
	var errs apperr.Fields
	w.Check(&errs)
	return errs.Err()
}

// Check adds the window's field errors (staff_id, start_at, end_at) to errs.
func (w Window) Check(errs *apperr.Fields) {
	if w.StaffID == "" {
		errs.Add("staff_id", "is required")
	} else if !uuid.Valid(w.StaffID) {
		errs.Add("staff_id", "must be a UUID")
	}
	if w.StartAt.IsZero() {
		errs.Add("start_at", "is required")
	}
	if w.EndAt.IsZero() {
		errs.Add("end_at", "is required")
	}
	if !w.StartAt.IsZero() && !w.EndAt.IsZero() && !w.EndAt.After(w.StartAt) {
		errs.Add("end_at", "must be after start_at")
	}
}

func (w Window) normalized() Window {
	return Window{StaffID: w.StaffID, StartAt: event.Instant(w.StartAt), EndAt: event.Instant(w.EndAt)}
}

// Schedule is the aggregate.
type Schedule struct {
	id         string
	orderID    string
	customerID string
	window     Window
	status     Status

	version int
	changes []event.Event
}

// New decides a new planned schedule for an order.
func New(id, orderID, customerID string, w Window, notes string) (*Schedule, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	w = w.normalized()
	s := &Schedule{}
	s.record(Created{ScheduleID: id, OrderID: orderID, CustomerID: customerID, StaffID: w.StaffID, StartAt: w.StartAt, EndAt: w.EndAt,
		Notes: notes, Status: StatusPlanned})
	return s, nil
}

// Rehydrate rebuilds a schedule from its stored events.
func Rehydrate(events []event.Event) (*Schedule, error) {
	s := &Schedule{}
	for i, e := range events {
		if _, ok := e.(Created); i == 0 && !ok {
			return nil, fmt.Errorf("schedule stream starts with %s, not ScheduleCreated", e.EventType())
		}
		s.apply(e)
		s.version++
	}
	return s, nil
}

func (s *Schedule) ID() string      { return s.id }
func (s *Schedule) OrderID() string { return s.orderID }

// CustomerID is the customer of the schedule's order, whose data key seals
// its notes; empty for a schedule created before it was recorded.
func (s *Schedule) CustomerID() string     { return s.customerID }
func (s *Schedule) Window() Window         { return s.window }
func (s *Schedule) Status() Status         { return s.status }
func (s *Schedule) Version() int           { return s.version }
func (s *Schedule) Changes() []event.Event { return s.changes }

// Reassign changes staff member or window; only while planned.
func (s *Schedule) Reassign(w Window) error {
	if err := w.Validate(); err != nil {
		return err
	}
	w = w.normalized()
	if w == s.window {
		return nil
	}
	if s.status != StatusPlanned {
		return &apperr.RuleError{Rule: "schedule.not_planned",
			Detail: fmt.Sprintf("a schedule can be reassigned only while planned; it is %s", s.status)}
	}
	s.record(AssignmentUpdated{StaffID: w.StaffID, StartAt: w.StartAt, EndAt: w.EndAt})
	return nil
}

// ChangeStatus moves the schedule to status to.
func (s *Schedule) ChangeStatus(to Status) error {
	if to == s.status {
		return nil
	}
	if s.status.CanMoveTo(to) {
		s.record(StatusChanged{From: s.status, To: to})
		return nil
	}
	return invalidTransition(s.status, to)
}

func (s *Schedule) record(e event.Event) {
	s.apply(e)
	s.changes = append(s.changes, e)
}

func (s *Schedule) apply(e event.Event) {
	switch e := e.(type) {
	case Created:
		s.id, s.orderID, s.customerID, s.status = e.ScheduleID, e.OrderID, e.CustomerID, e.Status
		s.window = Window{StaffID: e.StaffID, StartAt: e.StartAt, EndAt: e.EndAt}
	case AssignmentUpdated:
		s.window = Window{StaffID: e.StaffID, StartAt: e.StartAt, EndAt: e.EndAt}
	case StatusChanged:
		s.status = e.To
	}
}
