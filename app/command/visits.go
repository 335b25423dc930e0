package command

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"hearth/domain/apperr"
	"hearth/domain/civil"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/plan"
	"hearth/domain/schedule"
	"hearth/domain/uuid"
)

// PlanVisit is the visit generator's record of one visit of a plan it
// turned into an order (the ledger, one row per visit key).
type PlanVisit struct {
	Key, PlanID, OrderID string
	StartAt, EndAt       time.Time
	// StaffID is the plan's preferred staff member the visit's order was
	// planned for when it has an assignee (the generator's booking, or one
	// it kept: the dispatcher may have moved the order to someone else by
	// hand); "" when unassigned or the plan prefers nobody.
	StaffID    string
	PriceCents int64
	// UnassignedReason says why a visit whose plan prefers a staff member
	// has none.
	UnassignedReason string
	// PlannedFor is the plan's preferred staff member the order was last
	// planned for, whether it got them or not: a visit left unassigned is
	// planned again, as a booked one is, when the plan comes to prefer
	// someone else. "" when the plan preferred nobody, or on a row an
	// earlier release wrote (staffDiffers).
	PlannedFor string
	// Cancelled: the plan no longer has the visit; its order was cancelled.
	Cancelled bool
	// Withdrawn: the generator cancelled the order because the plan no
	// longer had the visit (not someone by hand): if the plan has the visit
	// again, it gets a new order.
	Withdrawn bool
	// Generation counts the orders the visit had before its current one
	// (plan.VisitOrderID).
	Generation int
	// Existing marks a row read from the ledger (PlanVisits sets it):
	// saving it updates the row instead of inserting a new one.
	Existing bool `json:"-"`
}

// differs reports whether the plan's visit v is no longer what the ledger
// row says was ordered (moved, another window, price or staff member).
func (r PlanVisit) differs(v plan.Visit) bool {
	return !r.StartAt.Equal(v.StartAt) || !r.EndAt.Equal(v.EndAt) || r.PriceCents != v.PriceCents || r.staffDiffers(v)
}

// staffDiffers reports whether the plan's preferred staff member for v is
// not the one the row was planned for. A row left unassigned with a reason
// was planned for PlannedFor; one an earlier release wrote names nobody
// there, and is taken as planned for the plan's current choice (else it
// would be planned again every round).
func (r PlanVisit) staffDiffers(v plan.Visit) bool {
	if r.StaffID == "" && r.UnassignedReason != "" {
		return r.PlannedFor != "" && r.PlannedFor != v.StaffID
	}
	return r.StaffID != v.StaffID
}

// visitScheduleID is the id of the schedule of the visit's order of the
// given generation.
func visitScheduleID(key string, generation int) string {
	if generation == 0 {
		return uuid.FromName("schedule/" + key)
	}
	return uuid.FromName(fmt.Sprintf("schedule/%s/%d", key, generation))
}

// VisitGenerator turns service plans into orders and schedules, one order
// per visit, ahead of time. Each visit is its own transaction: the order's
// events, its schedule and booking, and the ledger row commit together or
// not at all, and the order's id is derived from the visit's key, so a
// second attempt (a retry, another worker, a new leader after a crash)
// finds the ledger row, or loses on the order's stream, and creates
// nothing.
type VisitGenerator struct {
	tx Transactor
	// Between, when set, runs before each visit's transaction (tests stop
	// a run there).
	Between func(ctx context.Context)
	// Fatal, when set, tells an error that ends a round of All (a stale
	// leadership term) from one that only fails its plan.
	Fatal func(error) bool
	// MerchantShare, when above 0, is the most plans of one merchant a
	// round of All runs (PLAN_MERCHANT_SHARE): a merchant with more has
	// the others run in the next rounds, from where the last share ended.
	// One round serves every merchant, so without it the round, and every
	// other merchant's wait for its next one, grows with the plans of the
	// merchant that has most. 0: every plan every round.
	MerchantShare int
	// Interval is how often All runs (PLAN_INTERVAL). A plan run every k
	// rounds orders its visits a horizon ahead, so its merchant's share
	// never leaves it waiting more rounds than the horizon covers (one
	// round less, for the round's own length). 0: the share as it is.
	Interval time.Duration

	mu     sync.Mutex
	turnOf map[string]merchantTurn // by merchant, as the last round left it
}

// merchantTurn is where a merchant's plans stood after a round.
type merchantTurn struct {
	listed int // how many plans it had: those after them are new
	next   int // where the next share starts among them
}

// NewVisitGenerator checks its dependency.
func NewVisitGenerator(tx Transactor) (*VisitGenerator, error) {
	if tx == nil {
		return nil, errors.New("command.NewVisitGenerator: nil transactor")
	}
	return &VisitGenerator{tx: tx}, nil
}

// GeneratorActor is the subject of the events the generator appends.
const GeneratorActor = "system:plans"

// GenerateVisits brings one plan's orders up to date for [Now, Now+Horizon).
type GenerateVisits struct {
	MerchantID, PlanID string
	Now                time.Time
	Horizon            time.Duration
}

// VisitsDone counts what one run of a plan did.
type VisitsDone struct {
	Created, Unassigned, Replanned, Cancelled int
}

// Plan handles GenerateVisits: it creates the orders of the plan's visits
// that start in the range and have none, re-plans the orders of visits not
// started yet that changed (moved, even beyond the range, or changed from
// an earlier visit on), and cancels the orders of visits not started yet
// that the plan no longer has (skipped, moved away by a change, after a
// pause or the end). Whether a visit has started is decided on its current
// start (the plan's) and its order's status, never on the start the ledger
// recorded: a visit moved later is re-planned even when its old start has
// passed since. Started and finished visits are never touched. It stops at
// the first error, ctx's included; what it committed stays, and the next
// run carries on from there. For a plan of an erased customer it creates
// and moves no order (an order's notes are personal, and nobody can make a
// visit to a customer whose address is gone), but cancels, as for any
// ended plan, the orders of visits not started yet (the erasure ended the
// plan), freeing their bookings: a cancellation closes work, and its reason
// is sealed away at once (aggregates.Facts.Closing).
func (g *VisitGenerator) Plan(ctx context.Context, cmd GenerateVisits) (VisitsDone, error) {
	var done VisitsDone
	meta := event.Meta{MerchantID: cmd.MerchantID, Actor: GeneratorActor, CorrelationID: uuid.New(), OccurredAt: event.Instant(cmd.Now)}
	until := cmd.Now.Add(cmd.Horizon)
	var p *plan.Plan
	var want []plan.Visit
	var ledger []PlanVisit
	erased := false
	if _, err := g.tx.Run(ctx, meta, func(ctx context.Context, s Session) error {
		var err error
		if p, err = s.ServicePlan(ctx, cmd.PlanID); err != nil {
			return err
		}
		if erased, err = s.CustomerErased(ctx, p.CustomerID()); err != nil {
			return err
		}
		if ledger, err = s.PlanVisits(ctx, cmd.PlanID); err != nil {
			return err
		}
		if !erased {
			want = p.Visits(cmd.Now, until)
		}
		return nil
	}); err != nil {
		return done, err
	}
	have := map[string]PlanVisit{}
	for _, v := range ledger {
		have[v.Key] = v
	}
	replan := func(key string) error {
		if g.Between != nil {
			g.Between(ctx)
		}
		moved, err := g.replan(ctx, meta, cmd.PlanID, key, cmd.Now)
		if moved {
			done.Replanned++
		}
		return err
	}
	wanted := map[string]bool{}
	for _, v := range want {
		wanted[v.Key] = true
		if r, ok := have[v.Key]; ok && !(r.Withdrawn && v.StartAt.After(cmd.Now)) {
			// Not r.StartAt: the ledger's start is where the order was,
			// which may have passed while the visit (moved later) has
			// not. replan looks at the order's status.
			if r.Cancelled || !v.StartAt.After(cmd.Now) || !r.differs(v) {
				continue
			}
			if err := replan(v.Key); err != nil {
				return done, err
			}
			continue
		}
		if g.Between != nil {
			g.Between(ctx)
		}
		created, err := g.create(ctx, meta, cmd.PlanID, v.Key, cmd.Now, until)
		if err != nil {
			return done, err
		}
		if created != nil {
			done.Created++
			if created.UnassignedReason != "" {
				done.Unassigned++
			}
		}
	}
	for _, r := range ledger {
		if r.Cancelled || wanted[r.Key] {
			continue
		}
		v, has := p.VisitByKey(r.Key)
		switch {
		case has && !v.StartAt.Before(until):
			// Moved beyond the horizon: re-planned at once, its order's
			// window and booking moved there (not an erased customer's:
			// no new work for them).
			if erased || !r.differs(v) {
				continue
			}
			if err := replan(r.Key); err != nil {
				return done, err
			}
			continue
		case has: // its start has passed: started
			continue
		case !startOf(p, r).After(cmd.Now):
			continue // gone from the plan after its start: never touched
		}
		if g.Between != nil {
			g.Between(ctx)
		}
		cancelled, err := g.cancel(ctx, meta, cmd.PlanID, r.Key, cmd.Now)
		if err != nil {
			return done, err
		}
		if cancelled {
			done.Cancelled++
		}
	}
	return done, nil
}

// create creates the order of the visit with key, in one transaction, if
// the plan still has it and nobody created it yet, or a new one if the
// generator withdrew the visit's order before (the plan has it again); nil
// when it did not.
func (g *VisitGenerator) create(ctx context.Context, meta event.Meta, planID, key string, now, until time.Time) (*PlanVisit, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var rec *PlanVisit
	_, err := g.tx.Run(ctx, meta, func(ctx context.Context, s Session) error {
		rec = nil
		p, err := s.ServicePlan(ctx, planID)
		if err != nil {
			return err
		}
		v, ok := p.VisitByKey(key)
		if !ok || v.StartAt.Before(now) || !v.StartAt.Before(until) {
			return nil // gone meanwhile
		}
		r, err := ledgerRow(ctx, s, planID, key)
		if err != nil {
			return err
		}
		switch {
		case r.Key == "":
			r = PlanVisit{Key: key, PlanID: planID}
		case r.Withdrawn && v.StartAt.After(now):
			r.Generation++ // its next order; the row is updated (Existing)
			r.Cancelled, r.Withdrawn, r.StaffID = false, false, ""
		default:
			return nil // created meanwhile
		}
		r.OrderID, r.StartAt, r.EndAt, r.PriceCents, r.UnassignedReason = plan.VisitOrderID(key, r.Generation), v.StartAt, v.EndAt, v.PriceCents, ""
		r.PlannedFor = v.StaffID
		var sch *schedule.Schedule
		if v.StaffID != "" {
			if sch, r.UnassignedReason, err = bookAs(ctx, s, visitScheduleID(key, r.Generation), r.OrderID, p.CustomerID(), v.StaffID, v, nil); err != nil {
				return err
			}
		}
		notes := fmt.Sprintf("Visit of %s, service plan %s.", v.Date, planID)
		if r.UnassignedReason != "" {
			notes += " Not assigned: " + r.UnassignedReason
		}
		o, err := order.New(order.NewOrder{ID: r.OrderID, CustomerID: p.CustomerID(), AmountCents: v.PriceCents, Notes: notes,
			ScheduledStartAt: &v.StartAt, ScheduledEndAt: &v.EndAt, PlanID: planID, VisitDate: v.Date.String()})
		if err != nil {
			return err
		}
		s.AddOrder(o)
		if sch != nil {
			r.StaffID = v.StaffID
			if err := o.Assign(order.Assignment{StaffID: v.StaffID, StartAt: v.StartAt, EndAt: v.EndAt}); err != nil {
				return err
			}
			s.AddSchedule(sch)
		}
		rec = &r
		return s.SaveVisit(ctx, r)
	})
	var conflict *apperr.ConflictError
	if errors.As(err, &conflict) {
		return nil, nil // another attempt created it first: its ledger row and order stand
	}
	return rec, err
}

// bookAs books staff member staffID (the visit's preferred one, or the one
// its order is assigned to) for the visit, with a schedule of the given id.
// When the staff member is inactive, not working then (their working
// hours, when any are set, in the merchant's zone as availability reads
// them, not the plan's: a holiday, a sick day, outside their shifts), or
// already booked over the window: no schedule, and the reason.
// A live schedule (held, or nil) that holds the window already is the
// booking: nothing is written.
func bookAs(ctx context.Context, s Session, scheduleID, orderID, customerID, staffID string, v plan.Visit,
	held *schedule.Schedule) (*schedule.Schedule, string, error) {
	who := "the preferred staff member " + staffID
	if staffID != v.StaffID {
		who = "staff member " + staffID
	}
	exists, active, err := s.StaffActive(ctx, staffID)
	if err != nil {
		return nil, "", err
	}
	if !exists || !active {
		return nil, who + " is not active", nil
	}
	hours, loc, set, err := s.StaffHours(ctx, staffID)
	if err != nil {
		return nil, "", err
	}
	if set && !hours.Covers(v.StartAt, v.EndAt, loc) {
		why := "outside their working hours"
		d := civil.DateOf(v.StartAt, loc)
		if e, ok := hours.ExceptionOn(d); ok && len(e.Shifts) == 0 {
			// Off, never why: the reason (a sick day is health data) is
			// kept in their hours alone, which their erasure deletes;
			// this text goes into the ledger and the customer's order.
			why = fmt.Sprintf("off on %s", d)
		}
		return nil, fmt.Sprintf("%s is not working then (%s)", who, why), nil
	}
	if held != nil && held.Window().StaffID == staffID && held.Window().StartAt.Equal(v.StartAt) && held.Window().EndAt.Equal(v.EndAt) {
		// A stand-in's booking would rewrite the schedule's booking with
		// nothing appended to the schedule: a move of it committed since
		// it was read would keep its window in the schedule, and lose it
		// in the bookings.
		return held, "", nil
	}
	sch, err := schedule.New(scheduleID, orderID, customerID, schedule.Window{StaffID: staffID, StartAt: v.StartAt, EndAt: v.EndAt}, "")
	if err != nil {
		return nil, "", err
	}
	err = s.Book(ctx, sch)
	var conflict *apperr.ConflictError
	if errors.As(err, &conflict) {
		return nil, conflict.Detail, nil
	}
	if err != nil {
		return nil, "", err
	}
	return sch, "", nil
}

// cancel cancels the order of a visit the plan no longer has, unless it
// has started or ended; it reports whether it did.
func (g *VisitGenerator) cancel(ctx context.Context, meta event.Meta, planID, key string, now time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	cancelled := false
	_, err := g.tx.Run(ctx, meta, func(ctx context.Context, s Session) error {
		cancelled = false
		r, err := ledgerRow(ctx, s, planID, key)
		if err != nil {
			return err
		}
		if r.Key == "" || r.Cancelled {
			return nil
		}
		p, err := s.ServicePlan(ctx, planID)
		if err != nil {
			return err
		}
		if !startOf(p, r).After(now) {
			return nil // started: never touched
		}
		// Anywhere, not only up to its old start: a visit moved beyond
		// the horizon, or one moved earlier whose start has passed, is
		// still the plan's.
		if _, ok := p.VisitByKey(key); ok {
			return nil // still planned
		}
		o, err := s.Order(ctx, r.OrderID)
		if err != nil {
			return err
		}
		r.Cancelled = true
		switch o.Status() {
		case order.StatusInService, order.StatusCompleted:
			return nil // started or done: never touched
		case order.StatusCancelled:
			return s.SaveVisit(ctx, r)
		}
		if err := o.Cancel("the service plan no longer has this visit"); err != nil {
			return err
		}
		r.Withdrawn = true
		sch, found, err := s.LiveSchedule(ctx, o.ID())
		if err != nil {
			return err
		}
		if found {
			if err := sch.ChangeStatus(schedule.StatusCancelled); err != nil {
				return err
			}
			if err := s.Book(ctx, sch); err != nil {
				return err
			}
		}
		cancelled = true
		return s.SaveVisit(ctx, r)
	})
	var conflict *apperr.ConflictError
	if errors.As(err, &conflict) {
		return false, nil // changed meanwhile: the next run looks again
	}
	return cancelled, err
}

// PlanRef names one plan of one merchant.
type PlanRef struct{ MerchantID, PlanID string }

// PlanLister lists every service plan (all merchants'), oldest first.
type PlanLister interface {
	ListPlans(ctx context.Context) ([]PlanRef, error)
}

// All runs Plan over the plans the lister lists, the merchants' in turn
// (turns), each merchant's share of them (MerchantShare). A plan that
// fails does not stop the others, every merchant's: its error joins the
// round's, and the next round tries it again. Only ctx's end or an error
// Fatal names (a stale term) stops the round. Plans that ended are cheap:
// they have no visit to create, and only their cancellations to make.
func (g *VisitGenerator) All(ctx context.Context, plans PlanLister, now time.Time, horizon time.Duration) (VisitsDone, error) {
	var total VisitsDone
	listed, err := plans.ListPlans(ctx)
	if err != nil {
		return total, err
	}
	refs := g.turns(listed, horizon)
	var errs []error
	inARow := 0 // failures in a row that are not a plan's own
	for _, r := range refs {
		done, err := g.Plan(ctx, GenerateVisits{MerchantID: r.MerchantID, PlanID: r.PlanID, Now: now, Horizon: horizon})
		total.Created += done.Created
		total.Unassigned += done.Unassigned
		total.Replanned += done.Replanned
		total.Cancelled += done.Cancelled
		if err == nil {
			inARow = 0
			continue
		}
		errs = append(errs, fmt.Errorf("plan %s of merchant %s: %w", r.PlanID, r.MerchantID, err))
		if ctx.Err() != nil || (g.Fatal != nil && g.Fatal(err)) {
			break
		}
		if inARow++; planOwn(err) {
			inARow = 0
		}
		if inARow >= maxFailuresInARow {
			errs = append(errs, fmt.Errorf("%d plans in a row failed: the round ends (the database, not the plans)", inARow))
			break
		}
	}
	return total, errors.Join(errs...)
}

// turns orders a round's plans: the first plan of each merchant (in the
// order of their first plans in refs), then the second of each, and so on,
// so that a merchant's plans wait behind as many of another's as they are
// deep in their own list, not behind all of them (a first round runs a
// transaction per visit). A merchant with more than MerchantShare plans
// has a share of them run: its plans created since the last round first
// (their first visits may be close: a visit whose start has passed gets no
// order), then the ones after the last round's share, wrapping around.
// The share counts from the round's start: a round that stops early leaves
// the rest of it to the next pass over the merchant's plans.
func (g *VisitGenerator) turns(refs []PlanRef, horizon time.Duration) []PlanRef {
	var merchants []string
	by := map[string][]PlanRef{}
	for _, r := range refs {
		if _, ok := by[r.MerchantID]; !ok {
			merchants = append(merchants, r.MerchantID)
		}
		by[r.MerchantID] = append(by[r.MerchantID], r)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	turns := make(map[string]merchantTurn, len(merchants))
	shares := make([][]PlanRef, len(merchants))
	longest := 0
	for i, m := range merchants {
		own := by[m]
		n := len(own)
		last, ok := g.turnOf[m]
		if !ok || last.listed > n {
			last = merchantTurn{listed: n} // the term's first round: none is new
		}
		turn := merchantTurn{listed: n}
		shareOf := g.MerchantShare
		if g.Interval > 0 && shareOf > 0 {
			rounds := max(int(horizon/g.Interval)-1, 1) // a plan may wait that many and keep its visits ordered
			shareOf = max(shareOf, (n+rounds-1)/rounds)
		}
		if shareOf > 0 && n > shareOf {
			// Plans are listed oldest first: the new ones come last.
			share := slices.Clone(own[last.listed:min(n, last.listed+shareOf)])
			if old := own[:last.listed]; len(old) > 0 {
				from, more := last.next%len(old), min(shareOf-len(share), len(old))
				for j := range more {
					share = append(share, old[(from+j)%len(old)])
				}
				turn.next = from + more
			}
			own = share
		}
		turns[m] = turn
		shares[i] = own
		longest = max(longest, len(own))
	}
	g.turnOf = turns
	out := make([]PlanRef, 0, len(refs))
	for k := range longest {
		for _, own := range shares {
			if k < len(own) {
				out = append(out, own[k])
			}
		}
	}
	return out
}

// maxFailuresInARow ends a round of All whose plans keep failing for a
// reason none of them owns (the database gone): the next round tries
// again, rather than each plan waiting for its own connection in turn.
const maxFailuresInARow = 3

// planOwn reports an error of one plan's own (its data refused by a rule,
// a conflict, something it names missing, an event of its stream, or of an
// order's, that this release cannot read), which says nothing of the
// others.
func planOwn(err error) bool {
	var invalid *apperr.ValidationError
	var conflict *apperr.ConflictError
	var unreadable *event.UnreadableError
	return errors.As(err, &invalid) || errors.As(err, &conflict) || errors.Is(err, apperr.ErrNotFound) ||
		errors.As(err, &unreadable)
}

// replan brings the order of a visit not started yet (at its current start)
// in line with the plan's visit (moved, even beyond the horizon, or changed
// from an earlier visit on): its price when the plan's changed (else the
// order keeps its amount, one the dispatcher set by hand included), and its
// window with the preferred staff member booked anew, or unassigned with
// the reason when the staff member is busy then. An order that has started,
// ended or was cancelled by hand is left alone; the start the ledger
// recorded does not matter (it may have passed while the visit, moved
// later, has not).
func (g *VisitGenerator) replan(ctx context.Context, meta event.Meta, planID, key string, now time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	replanned := false
	_, err := g.tx.Run(ctx, meta, func(ctx context.Context, s Session) error {
		replanned = false
		r, err := ledgerRow(ctx, s, planID, key)
		if err != nil {
			return err
		}
		if r.Key == "" || r.Cancelled {
			return nil
		}
		p, err := s.ServicePlan(ctx, planID)
		if err != nil {
			return err
		}
		v, ok := p.VisitByKey(key)
		if !ok || !v.StartAt.After(now) || !r.differs(v) {
			return nil
		}
		o, err := s.Order(ctx, r.OrderID)
		if err != nil {
			return err
		}
		switch o.Status() {
		case order.StatusPending, order.StatusConfirmed, order.StatusDispatching:
		default:
			return nil // started, done or cancelled by hand: never touched
		}
		d := o.Details()
		if r.PriceCents != v.PriceCents {
			// Only a change of the plan's price: the amount the dispatcher
			// gave this visit's order by hand (a discount) stays through a
			// move or another staff member.
			d.AmountCents = v.PriceCents
		}
		if r.StartAt.Equal(v.StartAt) && r.EndAt.Equal(v.EndAt) && !r.staffDiffers(v) {
			// The price alone: the amount changes, nothing else (the
			// assignment, the dispatcher's by hand included, stays).
			if err := o.UpdateDetails(d); err != nil {
				return err
			}
			r.PriceCents = v.PriceCents
			replanned = true
			return s.SaveVisit(ctx, r)
		}
		sch, live, err := s.LiveSchedule(ctx, o.ID())
		if err != nil {
			return err
		}
		// Who to book at the new window: whoever the order is assigned to
		// now (the dispatcher may have chosen them by hand), unless the
		// plan's preferred staff member changed to another; then the
		// preferred one. A plan that prefers nobody any more names nobody
		// to book instead: the assignee stays, if they can take the window.
		var candidates []string
		if live && (!r.staffDiffers(v) || v.StaffID == "") {
			candidates = append(candidates, sch.Window().StaffID)
		}
		if v.StaffID != "" && !slices.Contains(candidates, v.StaffID) {
			candidates = append(candidates, v.StaffID)
		}
		r.UnassignedReason = ""
		var booked *schedule.Schedule
		for _, staffID := range candidates {
			// A stand-in of the schedule with the new window tries the
			// booking (its savepoint keeps the old one on a clash).
			// Named by the order (its generation) and its version too: a
			// visit moved back to a start it had before, or a new order of
			// the visit moved where an earlier one was, must not meet that
			// move's stand-in, cancelled since, as a stream that exists.
			id := uuid.FromName(fmt.Sprintf("schedule/%s/%s/%d/%d", key, o.ID(), v.StartAt.Unix(), o.Version()))
			if live {
				id = sch.ID()
			}
			var reason string
			var held *schedule.Schedule
			if live {
				held = sch
			}
			if booked, reason, err = bookAs(ctx, s, id, o.ID(), o.CustomerID(), staffID, v, held); err != nil {
				return err
			}
			if booked != nil {
				r.UnassignedReason = ""
				break
			}
			if r.UnassignedReason == "" {
				r.UnassignedReason = reason
			}
		}
		if booked == nil {
			var note string
			if !r.StartAt.Equal(v.StartAt) || !r.EndAt.Equal(v.EndAt) {
				// Not when only the preferred staff member changed: the
				// visit stays where it was.
				note = fmt.Sprintf(" Moved to %s.", v.StartAt.Format(time.RFC3339))
			}
			if r.UnassignedReason != "" {
				note += " Not assigned: " + r.UnassignedReason
			}
			// Only when it fits: the merchant may have filled the notes
			// (order.MaxNotes), and a re-plan must not fail on them, run
			// after run. The plan's visits show the new window and why it
			// is unassigned all the same.
			if utf8.RuneCountInString(d.Notes)+utf8.RuneCountInString(note) <= order.MaxNotes {
				d.Notes += note
			}
		}
		if err := o.UpdateDetails(d); err != nil {
			return err
		}
		switch {
		case booked != nil && live:
			if err := sch.Reassign(booked.Window()); err != nil {
				return err
			}
		case booked != nil:
			s.AddSchedule(booked)
		case live: // no staff member now, or busy: the old booking goes
			if err := sch.ChangeStatus(schedule.StatusCancelled); err != nil {
				return err
			}
			if err := s.Book(ctx, sch); err != nil {
				return err
			}
			o.Unassign()
		}
		r.StaffID = ""
		if booked != nil {
			r.StaffID = v.StaffID
			if err := o.Assign(order.Assignment{StaffID: booked.Window().StaffID, StartAt: v.StartAt, EndAt: v.EndAt}); err != nil {
				return err
			}
		}
		r.StartAt, r.EndAt, r.PriceCents, r.PlannedFor = v.StartAt, v.EndAt, v.PriceCents, v.StaffID
		replanned = true
		return s.SaveVisit(ctx, r)
	})
	var conflict *apperr.ConflictError
	if errors.As(err, &conflict) {
		return false, nil // changed meanwhile: the next run looks again
	}
	return replanned, err
}

// startOf is the later of where the ledger row's visit starts by the plan
// and where its order starts: a visit moved and dropped before a run
// re-planned its order has two, and has not taken place until both have
// passed (moved later: the order's start passes first; moved earlier, then
// paused before its new start: the plan's). A visit the plan's dates no
// longer hold (changed away) has its order's.
func startOf(p *plan.Plan, r PlanVisit) time.Time {
	if at, ok := p.StartOf(r.Key); ok && at.After(r.StartAt) {
		return at
	}
	return r.StartAt
}

// ledgerRow is the ledger row of the visit with key of a plan; the zero
// row when the visit has none yet.
func ledgerRow(ctx context.Context, s Session, planID, key string) (PlanVisit, error) {
	ledger, err := s.PlanVisits(ctx, planID)
	if err != nil {
		return PlanVisit{}, err
	}
	for _, l := range ledger {
		if l.Key == key {
			return l, nil
		}
	}
	return PlanVisit{}, nil
}
