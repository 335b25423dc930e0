package command

import (
	"context"
	"time"

	"hearth/domain/availability"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/plan"
	"hearth/domain/schedule"
	"hearth/domain/servicerequest"
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
	ServicePlan(ctx context.Context, id string) (*plan.Plan, error)
	AddServicePlan(p *plan.Plan)
	// MerchantTimeZone returns the IANA name of the merchant's time zone
	// (a merchant setting; UTC until set).
	MerchantTimeZone(ctx context.Context) (string, error)
	// PlanVisits returns the visit generator's ledger of the plan: every
	// visit it turned into an order.
	PlanVisits(ctx context.Context, planID string) ([]PlanVisit, error)
	// SaveVisit writes a visit's ledger row (one per key); a second
	// insert of a key is an *apperr.ConflictError.
	SaveVisit(ctx context.Context, v PlanVisit) error
	// LiveSchedule returns the order's planned or in-service schedule.
	LiveSchedule(ctx context.Context, orderID string) (*schedule.Schedule, bool, error)
	// Book makes the bookings match the schedule: a live schedule holds its
	// staff member's window (an overlap with another live schedule of that
	// staff member is an *apperr.ConflictError naming it), a finished one
	// frees it. A stored schedule the use case left as it is holds its
	// booking already: nothing is written.
	Book(ctx context.Context, s *schedule.Schedule) error

	// Customer returns the name of the merchant's customer; found is false
	// when the merchant has no such customer. The name is kept for the
	// outcome (Outcome.Names), so the answer need not look it up again.
	Customer(ctx context.Context, id string) (name string, found bool, err error)
	// RequireCustomer is Customer for a use case that decides nothing from
	// the answer: the commit fails with NoCustomer(id), writing nothing,
	// when the merchant has no such customer. The check may run with the
	// appends, saving the command a round trip; the name still reaches
	// Outcome.Names.
	RequireCustomer(id string)
	// CustomerErased reports whether the merchant's customer was erased
	// (GDPR article 17): nothing personal can be written about them.
	CustomerErased(ctx context.Context, id string) (bool, error)
	// StaffActive reports whether the staff member exists and is active.
	StaffActive(ctx context.Context, id string) (exists, active bool, err error)
	// StaffHours returns the working hours of the merchant's staff member
	// and the zone they are read in: the merchant's as it is now, the zone
	// availability reads them in (a plan keeps the zone it was created in,
	// but the hours are the staff member's, not the plan's). set is false
	// when none were ever written for them.
	StaffHours(ctx context.Context, id string) (h availability.WorkingHours, loc *time.Location, set bool, err error)
	// CatalogItem returns the item's base price; found is false when the
	// merchant has no such item.
	CatalogItem(ctx context.Context, id string) (priceCents int64, active, found bool, err error)
}

// Outcome is what a transaction wrote: every stream it touched.
type Outcome struct {
	Streams  map[string]Written // by stream id
	Position int64              // store position of the last event appended (or read)
	// Names are the names of the reference records the transaction read,
	// by id.
	Names map[string]string
}

// Of returns what the transaction left of one stream, with the names it
// read.
func (o Outcome) Of(id string) Written {
	w := o.Streams[id]
	w.Names = o.Names
	return w
}

// OfType returns what the transaction left of its one stream of the type
// (an order, a schedule); found is false when it touched none, or more
// than one.
func (o Outcome) OfType(streamType string) (w Written, found bool) {
	for id, s := range o.Streams {
		if len(s.Stream) == 0 || s.Stream[0].StreamType != streamType {
			continue
		}
		if found {
			return Written{}, false
		}
		w, found = o.Of(id), true
	}
	return w, found
}
