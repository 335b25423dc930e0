package order

import (
	"time"

	"hearth/domain/event"
)

// StreamType names the order stream in the event store.
const StreamType = "order"

// Created starts an order's stream.
type Created struct {
	OrderID          string     `json:"order_id"`
	RequestID        string     `json:"request_id,omitempty"`
	CustomerID       string     `json:"customer_id"`
	AmountCents      int64      `json:"amount_cents"`
	Notes            string     `json:"notes"`
	ScheduledStartAt *time.Time `json:"scheduled_start_at,omitempty"`
	ScheduledEndAt   *time.Time `json:"scheduled_end_at,omitempty"`
	Status           Status     `json:"status"`
	event.Erasure
	// PlanID and VisitDate name the service plan visit the order was
	// generated for (its original local date); empty for other orders.
	PlanID    string `json:"plan_id,omitempty"`
	VisitDate string `json:"visit_date,omitempty"`
}

// DetailsUpdated carries the new customer, amount and notes.
type DetailsUpdated struct {
	CustomerID  string `json:"customer_id"`
	AmountCents int64  `json:"amount_cents"`
	Notes       string `json:"notes"`
	event.Erasure
}

// StatusChanged moves the order along its life cycle. CompletedAt is set
// when To is completed.
type StatusChanged struct {
	From        Status     `json:"from"`
	To          Status     `json:"to"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
}

// Cancelled ends the order with a reason.
type Cancelled struct {
	From   Status `json:"from"`
	Reason string `json:"reason"`
	event.Erasure
}

// AssignmentUpdated sets who goes and when. An empty StaffID removes the
// assignment (its schedule was cancelled); nil times leave the window as it
// was.
type AssignmentUpdated struct {
	StaffID      string     `json:"staff_id,omitempty"`
	StartAt      *time.Time `json:"start_at,omitempty"`
	EndAt        *time.Time `json:"end_at,omitempty"`
	DispatchNote string     `json:"dispatch_note"`
	event.Erasure
}

// SettlementUpdated records payment.
type SettlementUpdated struct {
	SettlementStatus SettlementStatus `json:"settlement_status"`
	PaidAmountCents  int64            `json:"paid_amount_cents"`
	PaymentMethod    string           `json:"payment_method"`
	PaidAt           *time.Time       `json:"paid_at,omitempty"`
	SettlementNote   string           `json:"settlement_note"`
	event.Erasure
}

func (Created) EventType() string           { return "OrderCreated" }
func (DetailsUpdated) EventType() string    { return "OrderDetailsUpdated" }
func (StatusChanged) EventType() string     { return "OrderStatusChanged" }
func (Cancelled) EventType() string         { return "OrderCancelled" }
func (AssignmentUpdated) EventType() string { return "OrderAssignmentUpdated" }
func (SettlementUpdated) EventType() string { return "OrderSettlementUpdated" }

// The checks of the values every stored event of each type carries
// (event.Checker): ids, statuses; personal fields never.

func (e Created) Check() error {
	return event.Require(event.Has("order_id", e.OrderID != ""), event.Has("customer_id", e.CustomerID != ""),
		event.Has("status", e.Status != ""))
}
func (e DetailsUpdated) Check() error {
	return event.Require(event.Has("customer_id", e.CustomerID != ""))
}
func (e StatusChanged) Check() error {
	return event.Require(event.Has("from", e.From != ""), event.Has("to", e.To != ""))
}
func (e Cancelled) Check() error { return event.Require(event.Has("from", e.From != "")) }
func (e SettlementUpdated) Check() error {
	return event.Require(event.Has("settlement_status", e.SettlementStatus != ""))
}

// EventTypes returns the stored type names of its events, sorted.
func EventTypes() []string { return registry.Types() }

// Decode turns a stored order event back into its type. It rejects unknown
// types and payloads that do not parse, so that a corrupt event is reported
// rather than applied as zero values.
func Decode(eventType string, data []byte, more ...[]byte) (event.Event, error) {
	return registry.Decode(eventType, data, more...)
}

// Personal names, by stored event type, the fields that hold personal data
// of the order's customer: sealed at rest with the customer's data key
// (adapters/vault), erased with the customer.
var Personal = map[string][]string{
	"OrderCreated":           {"notes"},
	"OrderDetailsUpdated":    {"notes"},
	"OrderCancelled":         {"reason"},
	"OrderAssignmentUpdated": {"dispatch_note"},
	"OrderSettlementUpdated": {"settlement_note"},
}

// Closing names the stored event types that close an order and need their
// personal text to (a cancellation's reason): an erased customer's order
// must still be cancellable, its reason erased at once.
var Closing = map[string]bool{"OrderCancelled": true}

var registry = event.Registry{
	event.PersonalDataErasedType: event.As[event.PersonalDataErased],
	"OrderCreated":               event.As[Created],
	"OrderDetailsUpdated":        event.As[DetailsUpdated],
	"OrderStatusChanged":         event.As[StatusChanged],
	"OrderCancelled":             event.As[Cancelled],
	"OrderAssignmentUpdated":     event.As[AssignmentUpdated],
	"OrderSettlementUpdated":     event.As[SettlementUpdated],
}
