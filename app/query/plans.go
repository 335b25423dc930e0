package query

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/civil"
	"hearth/domain/event"
	"hearth/domain/plan"
)

// Plan is the read model of one service plan: its current terms (those of
// its last visits), the visits skipped and moved, and its life cycle. Its
// JSON is the stored format of the change log's snapshots, as Order's is.
type Plan struct {
	ID              string     `json:"id"`
	MerchantID      string     `json:"-"`
	CustomerID      string     `json:"customer_id"`
	CustomerName    string     `json:"customer_name,omitempty"`
	CatalogItemID   string     `json:"catalog_item_id"`
	CatalogItemName string     `json:"catalog_item_name,omitempty"`
	StaffID         *string    `json:"staff_id"`
	StaffName       string     `json:"staff_name,omitempty"`
	TimeZone        string     `json:"time_zone"`
	Status          string     `json:"status"`
	Terms           plan.Terms `json:"terms"`
	// ChangedFrom is the date of the visit the current terms start from;
	// nil when the plan never changed.
	ChangedFrom *civil.Date  `json:"changed_from"`
	Skipped     []civil.Date `json:"skipped"`
	Moved       []MovedVisit `json:"moved"`
	PausedAt    *time.Time   `json:"paused_at"`
	EndedAt     *time.Time   `json:"ended_at"`
	CreatedAt   time.Time    `json:"created_at"`
	UpdatedAt   time.Time    `json:"updated_at"`
	Version     int          `json:"version"`
}

// MovedVisit is a visit moved off its date: the visit dated Date starts at
// ToStart on ToDate (local).
type MovedVisit struct {
	Date    civil.Date  `json:"date"`
	ToDate  civil.Date  `json:"to_date"`
	ToStart civil.Clock `json:"to_start"`
}

// PlanFilter narrows a list of plans.
type PlanFilter struct {
	Statuses   []string
	CustomerID string
}

// Apply folds one service-plan event into the view.
func (v *Plan) Apply(r event.Recorded) error {
	at := r.OccurredAt.UTC()
	setTerms := func(t plan.Terms) {
		v.Terms, v.StaffID = t, nil
		if t.StaffID != "" {
			id := t.StaffID
			v.StaffID = &id
		}
	}
	switch e := r.Event.(type) {
	case plan.Created:
		*v = Plan{ID: e.PlanID, MerchantID: r.MerchantID, CustomerID: e.CustomerID, CatalogItemID: e.CatalogItemID,
			TimeZone: e.TimeZone, Status: string(plan.StatusActive), Skipped: []civil.Date{}, Moved: []MovedVisit{}, CreatedAt: at}
		setTerms(e.Terms)
	case plan.Changed:
		from := e.From
		v.ChangedFrom = &from
		setTerms(e.Terms)
	case plan.VisitSkipped:
		if !slices.Contains(v.Skipped, e.Date) {
			v.Skipped = append(v.Skipped, e.Date)
			slices.SortFunc(v.Skipped, civil.Date.Compare)
		}
	case plan.VisitMoved:
		m := MovedVisit{Date: e.Date, ToDate: e.ToDate, ToStart: e.ToStart}
		if i := slices.IndexFunc(v.Moved, func(x MovedVisit) bool { return x.Date == e.Date }); i >= 0 {
			v.Moved[i] = m
		} else {
			v.Moved = append(v.Moved, m)
			slices.SortFunc(v.Moved, func(a, b MovedVisit) int { return a.Date.Compare(b.Date) })
		}
	case plan.Paused:
		t := e.At.UTC()
		v.Status, v.PausedAt = string(plan.StatusPaused), &t
	case plan.Resumed:
		v.Status, v.PausedAt = string(plan.StatusActive), nil
	case plan.Ended:
		t := e.At.UTC()
		v.Status, v.EndedAt, v.PausedAt = string(plan.StatusEnded), &t, nil
	case event.Skipped: // a version bump only: the operator skipped this event
	default:
		return fmt.Errorf("plan view: unexpected event %T", r.Event)
	}
	if v.ID == "" {
		return fmt.Errorf("plan view: %s %s before ServicePlanCreated", r.Type, r.ID)
	}
	v.UpdatedAt, v.Version = at, r.Version
	return nil
}

// Plans answers the service-plan reads.
type Plans = Reads[Plan, PlanFilter]

// NewPlans checks its dependencies.
func NewPlans(rm ReadModel[Plan, PlanFilter], names Names) (Plans, error) {
	return newReads("NewPlans", rm, names,
		nameField[Plan]{Customers, func(v *Plan) *string { return &v.CustomerID }, func(v *Plan) *string { return &v.CustomerName }},
		nameField[Plan]{CatalogItems, func(v *Plan) *string { return &v.CatalogItemID }, func(v *Plan) *string { return &v.CatalogItemName }},
		nameField[Plan]{Staff, func(v *Plan) *string { return v.StaffID }, func(v *Plan) *string { return &v.StaffName }},
	)
}

// PlanStreams reads a plan's events from the event store, for reads that
// need the whole plan (its visits), not its read-model row.
type PlanStreams interface {
	// PlanEvents returns the merchant's plan's events in order;
	// apperr.ErrNotFound when it has no such plan.
	PlanEvents(ctx context.Context, merchantID, id string) ([]event.Event, error)
	// VisitOrders returns, by visit key, the ledger's word on the plan's
	// visits that are past their first order or withdrawn.
	VisitOrders(ctx context.Context, merchantID, id string) (map[string]VisitOrder, error)
}

// VisitOrder is what the visit generator's ledger says of one visit's
// orders.
type VisitOrder struct {
	OrderID    string
	Generation int  // the orders the visit had before OrderID's
	Withdrawn  bool // OrderID was cancelled because the plan no longer had the visit
}

// Visit is a plan's visit and the id of its order: the one it has, or will
// have once the generator reaches it.
type Visit struct {
	plan.Visit
	OrderID string
}

// PlanVisits answers a plan's visits.
type PlanVisits struct {
	streams PlanStreams
	now     func() time.Time
}

// NewPlanVisits checks its dependency.
func NewPlanVisits(streams PlanStreams) (PlanVisits, error) {
	if streams == nil {
		return PlanVisits{}, errors.New("query.NewPlanVisits: nil streams")
	}
	return PlanVisits{streams: streams, now: time.Now}, nil
}

// MaxVisitRange bounds the range of a visits read: its length, or its
// length on the plan's clock, whichever is shorter (a year from local
// midnight to midnight with the clocks going back in it is a year).
const MaxVisitRange = 366 * 24 * time.Hour

// Visits returns the plan's visits that start in [from, to), in order:
// not skipped, nor in a pause or after the end; moved ones where they
// were moved to.
func (q PlanVisits) Visits(ctx context.Context, scope Scope, id string, from, to time.Time) ([]Visit, error) {
	switch {
	case !to.After(from):
		return nil, apperr.Invalid("to", "must be after from")
	case to.Sub(from) > MaxVisitRange+24*time.Hour:
		// Longer than a year on any zone's clock; the plan's is read below.
		return nil, apperr.Invalid("to", "must be at most a year after from")
	case from.After(q.now().AddDate(0, 0, plan.HorizonDays)):
		// A plan's visits are walked from its start: past the horizon its
		// dates cannot be (plan.HorizonDays), and the walk would be long.
		return nil, apperr.Invalid("from", "must be at most %d days ahead", plan.HorizonDays)
	}
	if scope.StaffID != "" {
		return nil, apperr.ErrNotFound // workers see no plans
	}
	events, err := q.streams.PlanEvents(ctx, scope.MerchantID, id)
	if err != nil {
		return nil, err
	}
	p, err := plan.Rehydrate(events)
	if err != nil {
		return nil, err
	}
	if min(to.Sub(from), civil.OnClock(from, to, p.Location())) > MaxVisitRange {
		return nil, apperr.Invalid("to", "must be at most a year after from")
	}
	ledger, err := q.streams.VisitOrders(ctx, scope.MerchantID, id)
	if err != nil {
		return nil, err
	}
	now := q.now()
	visits := p.Visits(from, to)
	out := make([]Visit, len(visits))
	for i, v := range visits {
		out[i] = Visit{Visit: v, OrderID: plan.VisitOrderID(v.Key, 0)}
		switch l, ok := ledger[v.Key]; {
		case ok && l.Withdrawn && v.StartAt.After(now):
			out[i].OrderID = plan.VisitOrderID(v.Key, l.Generation+1) // the new order the generator gives it
		case ok:
			out[i].OrderID = l.OrderID
		}
	}
	return out, nil
}
