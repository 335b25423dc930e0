package command

import (
	"context"

	"hearth/app/event"
	"hearth/app/order"
	"hearth/app/schedule"
	"hearth/app/servicerequest"
)

// Transactor runs a use case in one event-store transaction. fn loads and
// adds aggregates through the Session and decides; when fn returns nil, the
// changes of every aggregate it loaded or added are appended (each at its
// loaded version + 1 onwards) and published, all in that transaction, so a
// flow that touches several aggregates appends all of its events or none.
// A concurrent append to any of those streams makes the transaction fail
// with an *apperr.ConflictError.
type Transactor interface {
	Run(ctx context.Context, meta event.Meta, fn func(ctx context.Context, s Session) error) (Outcome, error)
}

// Session is what a use case can do inside its transaction. Loads are
// scoped to the merchant of the transaction's meta: another merchant's id
// is apperr.ErrNotFound.
type Session interface {
	Order(ctx context.Context, id string) (*order.Order, error)
	AddOrder(o *order.Order)
	ServiceRequest(ctx context.Context, id string) (*servicerequest.Request, error)
	AddServiceRequest(r *servicerequest.Request)
	Schedule(ctx context.Context, id string) (*schedule.Schedule, error)
	AddSchedule(s *schedule.Schedule)
	// LiveSchedule returns the order's planned or in-service schedule.
	LiveSchedule(ctx context.Context, orderID string) (*schedule.Schedule, bool, error)
	// Book makes the bookings match the schedule: a live schedule holds its
	// staff member's window (an overlap with another live schedule of that
	// staff member is an *apperr.ConflictError naming it), a finished one
	// frees it.
	Book(ctx context.Context, s *schedule.Schedule) error

	// Customer returns the name of the merchant's customer; found is false
	// when the merchant has no such customer.
	Customer(ctx context.Context, id string) (name string, found bool, err error)
	// StaffActive reports whether the staff member exists and is active.
	StaffActive(ctx context.Context, id string) (exists, active bool, err error)
	// CatalogItem returns the item's base price; found is false when the
	// merchant has no such item.
	CatalogItem(ctx context.Context, id string) (priceCents int64, active, found bool, err error)
}

// Outcome is what a transaction wrote: every stream it touched.
type Outcome struct {
	Streams  map[string]Written // by stream id
	Position int64              // store position of the last event appended (or read)
}

// Of returns what the transaction left of one stream.
func (o Outcome) Of(id string) Written { return o.Streams[id] }
