// Package plan is the service plan aggregate: repeat work for one customer
// and one catalog item, at a price per visit, on a recurrence of local
// dates, in a local time window in the merchant's time zone, with an
// optional preferred staff member.
//
// A plan decides no orders itself; it answers which visits it has
// (Visits), each with a key (VisitKey: the plan's id and the visit's
// original local date) that a generator of orders is idempotent on: one
// order per key. The key of a visit never changes: not when the visit is
// moved, nor when the plan changes from a later visit on.
//
// Life cycle: active, paused (Pause, Resume) and ended (End, final). The
// commands that re-plan visits (ChangeFrom, Skip, Move) touch only visits
// that have not started yet (their start is after now), and the terms of a
// visit are those in force on its original date, so nothing before the
// visit a change starts from moves.
//
// Local times become instants through civil.Resolve (its rule covers the
// times a daylight-saving change skips or repeats). A visit lasts as long
// as its window (end minus start): a change of the clocks inside a window
// moves the end's local time, not the visit's length.
package plan

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/civil"
	"hearth/domain/event"
	"hearth/domain/uuid"
)

// Status is where a plan is in its life cycle.
type Status string

const (
	StatusActive Status = "active"
	StatusPaused Status = "paused"
	StatusEnded  Status = "ended"
)

// The rules the commands can break.
const (
	// RuleEnded: an ended plan changes no more.
	RuleEnded = "service_plan.ended"
	// RuleNoSuchVisit: the date is not a visit of the plan.
	RuleNoSuchVisit = "service_plan.no_such_visit"
	// RuleVisitStarted: a visit that has started (or whose start has passed)
	// is never re-planned.
	RuleVisitStarted = "service_plan.visit_started"
	// RuleTooManyPauses: a plan paused MaxPauses times is paused no more.
	RuleTooManyPauses = "service_plan.too_many_pauses"
	// RuleVisitSkipped: a skipped visit is not moved.
	RuleVisitSkipped = "service_plan.visit_skipped"
	// RuleMoveIntoPast: a visit moves to a start after now only, by a
	// move or by a change from a visit on.
	RuleMoveIntoPast = "service_plan.move_into_past"
)

// Window is the local time of day a visit takes: [Start, End), within one
// day (End may be 24:00).
type Window struct {
	Start civil.Clock `json:"start"`
	End   civil.Clock `json:"end"`
}

// Length is how long a visit in the window lasts.
func (w Window) Length() time.Duration { return (w.End - w.Start).Duration() }

func (w Window) check(errs *apperr.Fields) {
	startOK := w.Start >= 0 && w.Start < civil.EndOfDay
	if !startOK {
		errs.Add("window.start", "must be a time of day from 00:00 to 23:59")
	}
	if !w.End.Valid() {
		errs.Add("window.end", "must be a time of day from 00:00 to 24:00: a window lies within one day")
	} else if startOK && w.End <= w.Start {
		errs.Add("window.end", "must be after window.start")
	}
}

// Terms are what a plan promises from a visit on.
type Terms struct {
	PriceCents int64      `json:"price_cents"`
	StaffID    string     `json:"staff_id,omitempty"` // the preferred staff member, if any
	Window     Window     `json:"window"`
	Recurrence Recurrence `json:"recurrence"`
}

// MaxPriceCents bounds the price of a visit.
const MaxPriceCents = 100_000_000_00

func (t Terms) check(errs *apperr.Fields) {
	if t.PriceCents < 0 || t.PriceCents > MaxPriceCents {
		errs.Add("price_cents", "must be between 0 and %d", int64(MaxPriceCents))
	}
	if t.StaffID != "" && !uuid.Valid(t.StaffID) {
		errs.Add("staff_id", "must be a UUID")
	}
	t.Window.check(errs)
	t.Recurrence.check(errs)
}

func (t Terms) normalized() Terms {
	t.Recurrence = t.Recurrence.normalized()
	return t
}

func (t Terms) equal(u Terms) bool {
	return t.PriceCents == u.PriceCents && t.StaffID == u.StaffID && t.Window == u.Window &&
		t.Recurrence.equal(u.Recurrence)
}

// NewPlan is the input of New.
type NewPlan struct {
	ID            string
	CustomerID    string
	CatalogItemID string
	TimeZone      string // an IANA name, the merchant's setting
	Terms         Terms
}

// Visit is one visit of a plan.
type Visit struct {
	// Key identifies the visit for good (VisitKey): one order per key.
	Key string
	// Date is the visit's original local date, the one in its key.
	Date civil.Date
	// StartAt and EndAt are the visit's instants (UTC); a moved visit's
	// are where it was moved to.
	StartAt, EndAt time.Time
	PriceCents     int64
	StaffID        string
	Moved          bool
}

// VisitKey is the key of the visit dated d (its original local date) of
// plan planID.
func VisitKey(planID string, d civil.Date) string { return planID + "/" + d.String() }

type segment struct {
	from  civil.Date // zero for the first: it covers every date before the next
	terms Terms
}

type move struct {
	date  civil.Date
	start civil.Clock
}

type pause struct{ from, to time.Time } // to is zero while paused

// Plan is the aggregate.
type Plan struct {
	id            string
	customerID    string
	catalogItemID string
	timeZone      string
	loc           *time.Location
	segments      []segment
	skipped       map[civil.Date]bool
	moved         map[civil.Date]move
	byTarget      []civil.Date // moved's keys by new date (movedInto); nil when to be built
	changed       int          // Changed events
	moves         int          // VisitMoved events, a moved visit moved again included
	pauses        []pause
	status        Status
	endedAt       time.Time

	version int
	changes []event.Event
}

// MaxMovedVisits and MaxChanges bound the visits a plan may move (each
// counted once, however often it moves) and the changes it may take in its
// life; MaxMoves bounds its moves, a moved visit moved again included, and
// MaxPauses its pauses: a plan is loaded whole (its events) for every
// question put to it, by every command, every visits read and each
// transaction of the visit generator, which serves every merchant, so no
// command may grow it without end. (Skips are bounded by the dates within
// HorizonDays; ending happens once.)
const (
	MaxMovedVisits = 1000
	MaxChanges     = 200
	MaxMoves       = 2 * MaxMovedVisits
	MaxPauses      = 200
)

// HorizonDays is how far ahead of today a plan's dates may lie: a
// recurrence's start, the visit a change starts from, a skipped or moved
// visit and where it moves to, and the end of a visits read (Beyond).
// Every question put to a plan walks its dates from its start, so a date
// near the year 9999 would cost millions of steps, on every read and in
// the leader's visit generator, which serves every merchant.
const HorizonDays = 3660

// Beyond says why d lies past the horizon (HorizonDays after today in loc
// at now); "" when it does not.
func Beyond(d civil.Date, now time.Time, loc *time.Location) string {
	if last := civil.DateOf(now, loc).AddDays(HorizonDays); d.After(last) {
		return fmt.Sprintf("must be no later than %s (%d days ahead)", last, HorizonDays)
	}
	return ""
}

// beyond adds Beyond's finding, if any, to errs.
func (p *Plan) beyond(errs *apperr.Fields, field string, d civil.Date, now time.Time) {
	if msg := Beyond(d, now, p.loc); msg != "" {
		errs.Add(field, "%s", msg)
	}
}

// New decides a new plan and records ServicePlanCreated. Every field is
// checked first: a plan with a bad field is not created at all. The
// recurrence may not start before today in the plan's time zone.
func New(in NewPlan, now time.Time) (*Plan, error) {
	var errs apperr.Fields
	if !uuid.Valid(in.ID) {
		errs.Add("id", "must be a UUID")
	}
	for _, f := range []struct{ field, id string }{{"customer_id", in.CustomerID}, {"catalog_item_id", in.CatalogItemID}} {
		if f.id == "" {
			errs.Add(f.field, "is required")
		} else if !uuid.Valid(f.id) {
			errs.Add(f.field, "must be a UUID")
		}
	}
	loc, err := civil.LoadZone("time_zone", in.TimeZone)
	if v := (*apperr.ValidationError)(nil); errors.As(err, &v) {
		errs = append(errs, v.Fields...)
	}
	in.Terms.check(&errs)
	if loc != nil && in.Terms.Recurrence.Start.Valid() {
		if today := civil.DateOf(now, loc); in.Terms.Recurrence.Start.Before(today) {
			errs.Add("recurrence.start", "must not be before today (%s in %s)", today, in.TimeZone)
		} else if msg := Beyond(in.Terms.Recurrence.Start, now, loc); msg != "" {
			errs.Add("recurrence.start", "%s", msg)
		}
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	p := &Plan{}
	p.record(Created{PlanID: in.ID, CustomerID: in.CustomerID, CatalogItemID: in.CatalogItemID,
		TimeZone: in.TimeZone, Terms: in.Terms.normalized()})
	return p, nil
}

// Rehydrate rebuilds a plan from its stored events, in version order.
func Rehydrate(events []event.Event) (*Plan, error) {
	p := &Plan{}
	for i, e := range events {
		if _, ok := e.(Created); i == 0 && !ok {
			return nil, fmt.Errorf("service plan stream starts with %s, not ServicePlanCreated", e.EventType())
		}
		p.apply(e)
		p.version++
	}
	if p.loc == nil {
		return nil, fmt.Errorf("load service plan %s: time zone %q is unknown here", p.id, p.timeZone)
	}
	return p, nil
}

func (p *Plan) ID() string               { return p.id }
func (p *Plan) CustomerID() string       { return p.customerID }
func (p *Plan) CatalogItemID() string    { return p.catalogItemID }
func (p *Plan) TimeZone() string         { return p.timeZone }
func (p *Plan) Location() *time.Location { return p.loc }
func (p *Plan) Status() Status           { return p.status }
func (p *Plan) Version() int             { return p.version }
func (p *Plan) Changes() []event.Event   { return p.changes }

// Skipped reports whether the visit dated d is skipped.
func (p *Plan) Skipped(d civil.Date) bool { return p.skipped[d] }

// Terms returns the terms of the plan's last visits (a copy: changing it
// changes nothing).
func (p *Plan) Terms() Terms { return p.segments[len(p.segments)-1].terms.normalized() }

// ChangeFrom gives the plan new terms from its visit dated from on ("this
// and following"). Visits dated before from keep their terms; from on, the
// new recurrence gives the dates (from its own start: an unchanged
// recurrence keeps every date, and so every key). A skip or move of a
// visit from on stays with its date while the new recurrence still has that
// date. Refused when a visit dated from on has started, or when the new
// terms would put one (skipped or not) at a start that is not after now
// (RuleMoveIntoPast).
func (p *Plan) ChangeFrom(from civil.Date, t Terms, now time.Time) error {
	var errs apperr.Fields
	t.check(&errs)
	p.beyond(&errs, "from", from, now)
	if start := t.Recurrence.Start; start.Valid() {
		// Before the plan's own start, the walk to a date would begin ever
		// earlier (a start in the year 1, on every question).
		if first := p.segments[0].terms.Recurrence.Start; start.Before(first) {
			errs.Add("recurrence.start", "must not be before the plan's start (%s)", first)
		}
		p.beyond(&errs, "recurrence.start", start, now)
	}
	if err := errs.Err(); err != nil {
		return err
	}
	t = t.normalized()
	if _, err := p.existing(from); err != nil {
		return err
	}
	if err := notStarted(p.firstFrom(from), now); err != nil {
		return err
	}
	hasVisit := false
	for range t.Recurrence.datesFrom(from) {
		hasVisit = true
		break
	}
	if !hasVisit {
		return apperr.Invalid("recurrence", "has no visit on or after %s, the visit the change starts from", from)
	}
	if last := p.segments[len(p.segments)-1]; last.from.Compare(from) <= 0 && last.terms.equal(t) {
		return nil
	}
	if p.changed >= MaxChanges {
		return apperr.Invalid("from", "the plan was changed %d times, the most a plan may be: end it and create a new one", MaxChanges)
	}
	// Under the new terms, no visit dated from on may start before now (a
	// visit of today, not started yet, moved to an earlier hour that has
	// passed would drop out of the plan unnoticed).
	after := *p
	after.apply(Changed{From: from, Terms: t})
	if first := after.firstFrom(from); !first.StartAt.After(now) {
		return &apperr.RuleError{Rule: RuleMoveIntoPast, Detail: fmt.Sprintf(
			"the change would put the visit of %s at %s, which has passed; change from a later visit on, or move that one",
			first.Date, first.StartAt.Format(time.RFC3339))}
	}
	p.record(Changed{From: from, Terms: t})
	return nil
}

// Skip drops the visit dated d. Skipping it again changes nothing.
func (p *Plan) Skip(d civil.Date, now time.Time) error {
	var errs apperr.Fields
	p.beyond(&errs, "date", d, now)
	if err := errs.Err(); err != nil {
		return err
	}
	v, err := p.existing(d)
	if err != nil || p.skipped[d] {
		return err
	}
	if err := notStarted(v, now); err != nil {
		return err
	}
	p.record(VisitSkipped{Date: d})
	return nil
}

// Move moves the visit dated d to start at start on local date to. It keeps
// its key, its length and its terms; it must not have started, and must
// move to a start after now.
func (p *Plan) Move(d, to civil.Date, start civil.Clock, now time.Time) error {
	var errs apperr.Fields
	if to.IsZero() {
		errs.Add("to_date", "is required")
	} else if !to.Valid() {
		errs.Add("to_date", "is not a date")
	}
	if start < 0 || start >= civil.EndOfDay {
		errs.Add("start", "must be a time of day from 00:00 to 23:59")
	}
	p.beyond(&errs, "date", d, now)
	if to.Valid() {
		p.beyond(&errs, "to_date", to, now)
	}
	if err := errs.Err(); err != nil {
		return err
	}
	v, err := p.existing(d)
	if err != nil {
		return err
	}
	if p.skipped[d] {
		return &apperr.RuleError{Rule: RuleVisitSkipped, Detail: fmt.Sprintf("the visit of %s is skipped", d)}
	}
	if err := notStarted(v, now); err != nil {
		return err
	}
	if at := civil.Resolve(to, start, p.loc); !at.After(now) {
		return &apperr.RuleError{Rule: RuleMoveIntoPast,
			Detail: fmt.Sprintf("a visit moves to a start after now; %s %s is %s", to, start, at.Format(time.RFC3339))}
	}
	m, again := p.moved[d]
	if again && m == (move{to, start}) {
		return nil
	}
	if !again && len(p.moved) >= MaxMovedVisits {
		return apperr.Invalid("date", "the plan has %d moved visits, the most a plan may have (moving one of them again is allowed): end it and create a new one", MaxMovedVisits)
	}
	if p.moves >= MaxMoves {
		return apperr.Invalid("date", "the plan's visits were moved %d times, the most a plan may take: end it and create a new one", MaxMoves)
	}
	p.record(VisitMoved{Date: d, ToDate: to, ToStart: start})
	return nil
}

// Pause stops visits from starting from now on, until Resume. Pausing a
// paused plan changes nothing.
func (p *Plan) Pause(now time.Time) error {
	if err := p.live(); err != nil || p.status == StatusPaused {
		return err
	}
	if len(p.pauses) >= MaxPauses {
		return &apperr.RuleError{Rule: RuleTooManyPauses,
			Detail: fmt.Sprintf("the plan was paused %d times, the most a plan may be: end it and create a new one", MaxPauses)}
	}
	p.record(Paused{At: event.Instant(now)})
	return nil
}

// Resume lets visits start again from now on. Resuming an active plan
// changes nothing.
func (p *Plan) Resume(now time.Time) error {
	if err := p.live(); err != nil || p.status == StatusActive {
		return err
	}
	p.record(Resumed{At: event.Instant(now)})
	return nil
}

// End stops every visit that would start from now on, for good. Ending an
// ended plan changes nothing.
func (p *Plan) End(now time.Time) error {
	if p.status == StatusEnded {
		return nil
	}
	p.record(Ended{At: event.Instant(now)})
	return nil
}

// Visits lists the plan's visits that start in [from, to), ordered by
// start (then date): not skipped, not starting while the plan was paused,
// nor from its end on. Moved visits are where they were moved to. The
// list is a function of the stored events and the range only.
func (p *Plan) Visits(from, to time.Time) []Visit {
	lo, hi := civil.DateOf(from, p.loc).AddDays(-1), civil.DateOf(to, p.loc).AddDays(1)
	var out []Visit
	keep := func(v Visit) {
		if !v.StartAt.Before(from) && v.StartAt.Before(to) && !p.skipped[v.Date] && !p.stopped(v.StartAt) {
			out = append(out, v)
		}
	}
	for d, t := range p.occurrences(lo) {
		if d.After(hi) {
			break
		}
		if _, moved := p.moved[d]; !moved {
			keep(p.visitOf(d, t))
		}
	}
	// Only the moved visits whose new date is in the range: a read costs
	// its range, not the plan's moves.
	for _, d := range p.movedInto(lo, hi) {
		if v, ok := p.visit(d); ok {
			keep(v)
		}
	}
	slices.SortFunc(out, func(a, b Visit) int { return cmp.Or(a.StartAt.Compare(b.StartAt), a.Date.Compare(b.Date)) })
	return out
}

// VisitByKey returns the plan's visit with key (a VisitKey of the plan), if
// the plan has it: not skipped, not starting while the plan was paused nor
// from its end on, wherever it starts (a visit moved beyond any range of
// Visits included, or one whose start has passed).
func (p *Plan) VisitByKey(key string) (Visit, bool) {
	rest, ok := strings.CutPrefix(key, p.id+"/")
	if !ok {
		return Visit{}, false
	}
	d, err := civil.ParseDate(rest)
	if err != nil {
		return Visit{}, false
	}
	v, ok := p.visit(d)
	if !ok || p.skipped[d] || p.stopped(v.StartAt) {
		return Visit{}, false
	}
	return v, true
}

// StartOf returns where the visit with key (a VisitKey of the plan) starts,
// moved or not, whether or not the plan still has it (skipped, starting in
// a pause or after the end); false when its date is no visit of the plan's
// recurrence (changed away). A visit dropped after it was moved later has
// not started until that later start, whatever its order still says.
func (p *Plan) StartOf(key string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(key, p.id+"/")
	if !ok {
		return time.Time{}, false
	}
	d, err := civil.ParseDate(rest)
	if err != nil {
		return time.Time{}, false
	}
	v, ok := p.visit(d)
	return v.StartAt, ok
}

// occurrences yields the plan's visit dates from lo on, in order
// (skipped, paused or not), each with the terms in force on it: segment i
// gives the dates of its recurrence from its own from up to the next
// segment's. A segment that ends before lo is not walked, and one that
// starts before lo is walked from lo (Recurrence.datesFrom).
func (p *Plan) occurrences(lo civil.Date) iter.Seq2[civil.Date, Terms] {
	return func(yield func(civil.Date, Terms) bool) {
		for i, s := range p.segments {
			last := i+1 == len(p.segments)
			if !last && !lo.Before(p.segments[i+1].from) {
				continue
			}
			from := s.from
			if lo.After(from) {
				from = lo
			}
			for d := range s.terms.Recurrence.datesFrom(from) {
				if !last && !d.Before(p.segments[i+1].from) {
					break
				}
				if !yield(d, s.terms) {
					return
				}
			}
		}
	}
}

// movedInto returns the original dates of the moved visits whose new date
// lies in [lo, hi], ordered by new date: a binary search in the moved
// visits ordered by new date, built once per change of the moves.
func (p *Plan) movedInto(lo, hi civil.Date) []civil.Date {
	if p.byTarget == nil {
		p.byTarget = slices.SortedFunc(maps.Keys(p.moved), func(a, b civil.Date) int {
			return cmp.Or(p.moved[a].date.Compare(p.moved[b].date), a.Compare(b))
		})
	}
	i, _ := slices.BinarySearchFunc(p.byTarget, lo, func(d, lo civil.Date) int {
		if p.moved[d].date.Before(lo) {
			return -1
		}
		return 1
	})
	j := i
	for j < len(p.byTarget) && !p.moved[p.byTarget[j]].date.After(hi) {
		j++
	}
	return p.byTarget[i:j]
}

// firstFrom returns the visit that starts first among those dated from on
// (skipped or not): the first one not moved, or a moved one.
func (p *Plan) firstFrom(from civil.Date) Visit {
	var first Visit
	for d, t := range p.occurrences(from) {
		if _, moved := p.moved[d]; !moved {
			first = p.visitOf(d, t)
			break
		}
	}
	for d := range p.moved {
		if d.Before(from) {
			continue
		}
		if v, ok := p.visit(d); ok && (first.Key == "" || v.StartAt.Before(first.StartAt)) {
			first = v
		}
	}
	return first
}

// visit returns the visit dated d (skipped, paused or not), if the plan has
// one.
func (p *Plan) visit(d civil.Date) (Visit, bool) {
	i := len(p.segments) - 1
	for i > 0 && p.segments[i].from.After(d) {
		i--
	}
	s := p.segments[i]
	if d.Before(s.from) || !s.terms.Recurrence.has(d) {
		return Visit{}, false
	}
	return p.visitOf(d, s.terms), true
}

func (p *Plan) visitOf(d civil.Date, t Terms) Visit {
	day, clock := d, t.Window.Start
	m, moved := p.moved[d]
	if moved {
		day, clock = m.date, m.start
	}
	start := event.Instant(civil.Resolve(day, clock, p.loc))
	return Visit{Key: VisitKey(p.id, d), Date: d, StartAt: start, EndAt: start.Add(t.Window.Length()),
		PriceCents: t.PriceCents, StaffID: t.StaffID, Moved: moved}
}

// stopped reports whether a visit starting at t falls in a pause or after
// the end.
func (p *Plan) stopped(t time.Time) bool {
	if !p.endedAt.IsZero() && !t.Before(p.endedAt) {
		return true
	}
	for _, ps := range p.pauses {
		if !t.Before(ps.from) && (ps.to.IsZero() || t.Before(ps.to)) {
			return true
		}
	}
	return false
}

func (p *Plan) live() error {
	if p.status == StatusEnded {
		return &apperr.RuleError{Rule: RuleEnded, Detail: "the service plan has ended"}
	}
	return nil
}

// existing returns the visit dated d of a plan that has not ended.
func (p *Plan) existing(d civil.Date) (Visit, error) {
	if err := p.live(); err != nil {
		return Visit{}, err
	}
	v, ok := p.visit(d)
	if !ok {
		return Visit{}, &apperr.RuleError{Rule: RuleNoSuchVisit, Detail: fmt.Sprintf("the plan has no visit dated %s", d)}
	}
	return v, nil
}

func notStarted(v Visit, now time.Time) error {
	if v.StartAt.After(now) {
		return nil
	}
	return &apperr.RuleError{Rule: RuleVisitStarted,
		Detail: fmt.Sprintf("the visit of %s started at %s; started visits are not re-planned", v.Date, v.StartAt.Format(time.RFC3339))}
}

func (p *Plan) record(e event.Event) {
	p.apply(e)
	p.changes = append(p.changes, e)
}

func (p *Plan) apply(e event.Event) {
	switch e := e.(type) {
	case Created:
		p.id, p.customerID, p.catalogItemID, p.timeZone = e.PlanID, e.CustomerID, e.CatalogItemID, e.TimeZone
		// The zone as stored, read the same on every machine (a plan from
		// before LoadZone refused the machine's zone may name it); nil when
		// unknown: Rehydrate reports it.
		p.loc, _ = civil.StoredZone(e.TimeZone)
		p.segments = []segment{{terms: e.Terms}}
		p.skipped, p.moved = map[civil.Date]bool{}, map[civil.Date]move{}
		p.status = StatusActive
	case Changed:
		keep := 0
		for keep < len(p.segments) && p.segments[keep].from.Before(e.From) {
			keep++
		}
		p.segments = append(p.segments[:keep:keep], segment{from: e.From, terms: e.Terms})
		p.changed++
	case VisitSkipped:
		p.skipped[e.Date] = true
	case VisitMoved:
		p.moved[e.Date] = move{e.ToDate, e.ToStart}
		p.moves++
		p.byTarget = nil
	case Paused:
		p.pauses = append(p.pauses, pause{from: e.At})
		p.status = StatusPaused
	case Resumed:
		if n := len(p.pauses); n > 0 {
			p.pauses[n-1].to = e.At
		}
		p.status = StatusActive
	case Ended:
		p.endedAt = e.At
		if n := len(p.pauses); n > 0 && p.pauses[n-1].to.IsZero() {
			p.pauses[n-1].to = e.At
		}
		p.status = StatusEnded
	}
}

// VisitOrderID is the id of the order of the visit with key, of the given
// generation (how many orders the visit had before: one withdrawn while the
// plan did not have the visit, then planned again, gets a new one): derived
// from the key, so that whoever creates it, and however often, it is one
// stream.
func VisitOrderID(key string, generation int) string {
	if generation == 0 {
		return uuid.FromName("order/" + key)
	}
	return uuid.FromName("order/" + key + "/" + strconv.Itoa(generation))
}
