package plan_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/apperr"
	"hearth/domain/civil"
	"hearth/domain/event"
	"hearth/domain/plan"
	"hearth/domain/uuid"
)

// now is before every plan in these tests starts.
var now = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func day(t *testing.T, s string) civil.Date {
	t.Helper()
	d, err := civil.ParseDate(s)
	require.NoError(t, err)
	return d
}

func dayPtr(t *testing.T, s string) *civil.Date {
	d := day(t, s)
	return &d
}

func weekly(t *testing.T, start string, days ...time.Weekday) plan.Terms {
	t.Helper()
	return plan.Terms{
		PriceCents: 5000,
		Window:     plan.Window{Start: civil.At(9, 0), End: civil.At(11, 0)},
		Recurrence: plan.Recurrence{Frequency: plan.Weekly, Interval: 1, Weekdays: days, Start: day(t, start)},
	}
}

// newPlan creates a plan and reloads it from its events, as a command would.
func newPlan(t *testing.T, zone string, terms plan.Terms) *plan.Plan {
	t.Helper()
	p, err := plan.New(plan.NewPlan{ID: uuid.New(), CustomerID: uuid.New(), CatalogItemID: uuid.New(),
		TimeZone: zone, Terms: terms}, now)
	require.NoError(t, err)
	return reload(t, p)
}

// reload rebuilds a new plan from its events.
func reload(t *testing.T, p *plan.Plan) *plan.Plan {
	t.Helper()
	return replay(t, p, p.Changes())
}

// histories keeps each reloaded plan's stream, so that the next reload
// replays all of it.
var histories = map[*plan.Plan][]event.Event{}

// commit appends p's new events to its stream and reloads it.
func commit(t *testing.T, p *plan.Plan) *plan.Plan {
	t.Helper()
	stream := append(append([]event.Event{}, histories[p]...), p.Changes()...)
	return replay(t, p, stream)
}

// replay rebuilds a plan from stream, through the events' stored JSON, and
// checks it lists the same visits as p.
func replay(t *testing.T, p *plan.Plan, stream []event.Event) *plan.Plan {
	t.Helper()
	var decoded []event.Event
	for _, e := range stream {
		b, err := json.Marshal(e)
		require.NoError(t, err)
		back, err := plan.Decode(e.EventType(), b)
		require.NoError(t, err)
		decoded = append(decoded, back)
	}
	r, err := plan.Rehydrate(decoded)
	require.NoError(t, err)
	from, to := now.AddDate(-1, 0, 0), now.AddDate(3, 0, 0)
	require.Equal(t, p.Visits(from, to), r.Visits(from, to), "the stored events give the same visits")
	histories[r] = stream
	return r
}

func dates(vs []plan.Visit) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Date.String()
	}
	return out
}

func all(p *plan.Plan) []plan.Visit { return p.Visits(now.AddDate(-1, 0, 0), now.AddDate(3, 0, 0)) }

func TestRecurrenceDates(t *testing.T) {
	cases := []struct {
		name string
		r    plan.Recurrence
		want []string
	}{
		{"every 3 days, 4 visits", plan.Recurrence{Frequency: plan.Daily, Interval: 3, Start: day(t, "2027-02-26"), Count: 4},
			[]string{"2027-02-26", "2027-03-01", "2027-03-04", "2027-03-07"}},
		{"every other week on Monday and Thursday, from a Wednesday, until a date", plan.Recurrence{Frequency: plan.Weekly, Interval: 2,
			Weekdays: []time.Weekday{time.Thursday, time.Monday, time.Thursday}, Start: day(t, "2027-01-06"), Until: dayPtr(t, "2027-02-01")},
			[]string{"2027-01-07", "2027-01-18", "2027-01-21", "2027-02-01"}},
		{"weekly on the start's weekday", plan.Recurrence{Frequency: plan.Weekly, Interval: 1, Start: day(t, "2027-01-06"), Count: 3},
			[]string{"2027-01-06", "2027-01-13", "2027-01-20"}},
		{"monthly on the 31st is the last day of shorter months", plan.Recurrence{Frequency: plan.Monthly, Interval: 1, MonthDay: 31,
			Start: day(t, "2027-01-10"), Count: 4},
			[]string{"2027-01-31", "2027-02-28", "2027-03-31", "2027-04-30"}},
		{"every third month on the start's day", plan.Recurrence{Frequency: plan.Monthly, Interval: 3, Start: day(t, "2027-11-30"), Count: 3},
			[]string{"2027-11-30", "2028-02-29", "2028-05-30"}},
		{"monthly from after its day starts next month", plan.Recurrence{Frequency: plan.Monthly, Interval: 1, MonthDay: 5,
			Start: day(t, "2027-01-10"), Until: dayPtr(t, "2027-03-05")},
			[]string{"2027-02-05", "2027-03-05"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPlan(t, "UTC", plan.Terms{PriceCents: 1, Window: plan.Window{Start: civil.At(9, 0), End: civil.At(10, 0)}, Recurrence: c.r})
			require.Equal(t, c.want, dates(all(p)))
		})
	}
}

// Exactly one visit per key, whatever the range: listing two adjacent
// ranges gives the listing of both, and no key twice.
func TestKeysAreUniqueAndRangesAdd(t *testing.T) {
	terms := weekly(t, "2026-12-07", time.Monday, time.Wednesday, time.Saturday)
	terms.Window = plan.Window{Start: civil.At(23, 0), End: civil.EndOfDay}
	p := newPlan(t, "Australia/Sydney", terms)
	require.NoError(t, p.Move(day(t, "2027-01-04"), day(t, "2027-03-02"), civil.At(7, 0), now))
	p = commit(t, p)
	whole := all(p)
	keys := map[string]bool{}
	for _, v := range whole {
		require.False(t, keys[v.Key], "key %s twice", v.Key)
		keys[v.Key] = true
		require.Equal(t, plan.VisitKey(p.ID(), v.Date), v.Key)
	}
	from, to := now.AddDate(-1, 0, 0), now.AddDate(3, 0, 0)
	for cut := from; cut.Before(to); cut = cut.Add(97 * time.Hour) {
		require.Equal(t, whole, append(p.Visits(from, cut), p.Visits(cut, to)...), "cut at %s", cut)
	}
}

// A visit at 09:00 London or Sydney time stays at 09:00 local over both
// changes of the clocks; a visit in the skipped hour moves forward by the
// jump and keeps its length, one in the repeated hour takes the earlier
// instant.
func TestVisitsKeepTheirLocalTime(t *testing.T) {
	for _, zone := range []string{"Europe/London", "Australia/Sydney"} {
		t.Run(zone, func(t *testing.T) {
			loc, err := time.LoadLocation(zone)
			require.NoError(t, err)
			p := newPlan(t, zone, weekly(t, "2027-01-03", time.Sunday))
			offsets := map[int]bool{}
			for _, v := range all(p) {
				local := v.StartAt.In(loc)
				require.Equal(t, "09:00", local.Format("15:04"), v.Date)
				require.Equal(t, v.Date.String(), local.Format(time.DateOnly))
				require.Equal(t, 2*time.Hour, v.EndAt.Sub(v.StartAt))
				_, off := local.Zone()
				offsets[off] = true
			}
			require.Len(t, offsets, 2, "the visits span both changes")
		})
	}
	cases := []struct {
		zone, date string
		start      civil.Clock
		want       string
	}{
		{"Europe/London", "2027-03-28", civil.At(1, 30), "2027-03-28T01:30:00Z"},    // 02:30 BST
		{"Europe/London", "2027-10-31", civil.At(1, 30), "2027-10-31T00:30:00Z"},    // 01:30 BST, not GMT
		{"Australia/Sydney", "2027-10-03", civil.At(2, 30), "2027-10-02T16:30:00Z"}, // 03:30 AEDT
		{"Australia/Sydney", "2027-04-04", civil.At(2, 30), "2027-04-03T15:30:00Z"}, // 02:30 AEDT, not AEST
	}
	for _, c := range cases {
		t.Run(c.zone+"/"+c.date, func(t *testing.T) {
			terms := plan.Terms{Window: plan.Window{Start: c.start, End: c.start + 60},
				Recurrence: plan.Recurrence{Frequency: plan.Daily, Interval: 1, Start: day(t, c.date), Count: 1}}
			vs := all(newPlan(t, c.zone, terms))
			require.Len(t, vs, 1)
			require.Equal(t, c.want, vs[0].StartAt.Format(time.RFC3339))
			require.Equal(t, time.Hour, vs[0].EndAt.Sub(vs[0].StartAt))
			require.Equal(t, time.UTC, vs[0].StartAt.Location())
		})
	}
}

func fieldsOf(t *testing.T, err error) []string {
	t.Helper()
	var v *apperr.ValidationError
	require.ErrorAs(t, err, &v)
	return v.FieldNames()
}

// Bad input names its field, and nothing is created.
func TestNewRejectsBadInput(t *testing.T) {
	good := func() plan.NewPlan {
		return plan.NewPlan{ID: uuid.New(), CustomerID: uuid.New(), CatalogItemID: uuid.New(), TimeZone: "Europe/London",
			Terms: weekly(t, "2027-01-04", time.Monday)}
	}
	cases := []struct {
		name   string
		change func(*plan.NewPlan)
		fields []string
	}{
		{"no visit before the end", func(in *plan.NewPlan) { in.Terms.Recurrence.Until = dayPtr(t, "2027-01-03") }, []string{"recurrence.until"}},
		{"weekly, the end before the first weekday", func(in *plan.NewPlan) {
			in.Terms.Recurrence.Weekdays = []time.Weekday{time.Friday}
			in.Terms.Recurrence.Until = dayPtr(t, "2027-01-07")
		}, []string{"recurrence.until"}},
		{"weekly on the start's weekday, no end before it", func(in *plan.NewPlan) {
			in.Terms.Recurrence.Weekdays = nil
			in.Terms.Recurrence.Until = dayPtr(t, "2027-01-04")
		}, nil},
		{"monthly, the end before the month day", func(in *plan.NewPlan) {
			in.Terms.Recurrence = plan.Recurrence{Frequency: plan.Monthly, Interval: 1, MonthDay: 20, Start: day(t, "2027-01-21"), Until: dayPtr(t, "2027-02-19")}
		}, []string{"recurrence.until"}},
		{"end before start", func(in *plan.NewPlan) { in.Terms.Recurrence.Until = dayPtr(t, "2026-12-31") }, []string{"recurrence.until"}},
		{"end before start, said so", func(in *plan.NewPlan) { in.Terms.Recurrence.Until = dayPtr(t, "2026-12-31") },
			[]string{"recurrence.until: must not be before recurrence.start"}},
		{"window longer than a day", func(in *plan.NewPlan) { in.Terms.Window.End = civil.EndOfDay + 30 }, []string{"window.end"}},
		{"window ends before it starts", func(in *plan.NewPlan) { in.Terms.Window.End = civil.At(8, 0) }, []string{"window.end"}},
		{"empty window", func(in *plan.NewPlan) { in.Terms.Window.End = in.Terms.Window.Start }, []string{"window.end"}},
		{"window starts at 24:00", func(in *plan.NewPlan) { in.Terms.Window = plan.Window{Start: civil.EndOfDay, End: civil.EndOfDay} }, []string{"window.start"}},
		{"unknown time zone", func(in *plan.NewPlan) { in.TimeZone = "Europe/Atlantis" }, []string{"time_zone"}},
		{"no time zone", func(in *plan.NewPlan) { in.TimeZone = "" }, []string{"time_zone"}},
		{"ids", func(in *plan.NewPlan) { in.ID, in.CustomerID, in.CatalogItemID, in.Terms.StaffID = "x", "", "y", "z" },
			[]string{"id", "customer_id", "catalog_item_id", "staff_id"}},
		{"negative price", func(in *plan.NewPlan) { in.Terms.PriceCents = -1 }, []string{"price_cents"}},
		{"no frequency", func(in *plan.NewPlan) { in.Terms.Recurrence.Frequency = "" }, []string{"recurrence.frequency"}},
		{"interval 0", func(in *plan.NewPlan) { in.Terms.Recurrence.Interval = 0 }, []string{"recurrence.interval"}},
		{"weekdays on a daily rule", func(in *plan.NewPlan) { in.Terms.Recurrence.Frequency = plan.Daily }, []string{"recurrence.weekdays"}},
		{"bad weekday", func(in *plan.NewPlan) { in.Terms.Recurrence.Weekdays = []time.Weekday{7} }, []string{"recurrence.weekdays"}},
		{"month day on a weekly rule", func(in *plan.NewPlan) { in.Terms.Recurrence.MonthDay = 3 }, []string{"recurrence.month_day"}},
		{"month day 32", func(in *plan.NewPlan) {
			in.Terms.Recurrence = plan.Recurrence{Frequency: plan.Monthly, Interval: 1, MonthDay: 32, Start: day(t, "2027-01-04")}
		}, []string{"recurrence.month_day"}},
		{"both ends", func(in *plan.NewPlan) {
			in.Terms.Recurrence.Until = dayPtr(t, "2027-02-01")
			in.Terms.Recurrence.Count = 3
		}, []string{"recurrence.count"}},
		{"no start", func(in *plan.NewPlan) { in.Terms.Recurrence.Start = civil.Date{} }, []string{"recurrence.start"}},
		{"not a date", func(in *plan.NewPlan) { in.Terms.Recurrence.Start = civil.Date{Year: 2027, Month: 2, Day: 30} }, []string{"recurrence.start"}},
		{"start before today", func(in *plan.NewPlan) { in.Terms.Recurrence.Start = day(t, "2026-11-30") }, []string{"recurrence.start"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := good()
			c.change(&in)
			p, err := plan.New(in, now)
			if c.fields == nil {
				require.NoError(t, err)
				return
			}
			require.Nil(t, p, "nothing half-created")
			if strings.Contains(c.fields[0], ": ") {
				require.EqualError(t, err, "invalid input: "+c.fields[0])
				return
			}
			require.Equal(t, c.fields, fieldsOf(t, err))
		})
	}
}

// "This and following": visits before the change keep their dates, keys
// and terms; from the visit on, the new terms give them. An unchanged
// recurrence keeps every key.
func TestChangeFrom(t *testing.T) {
	p := newPlan(t, "Europe/London", weekly(t, "2027-01-04", time.Monday))
	before := all(p)
	from := day(t, "2027-02-01")

	priceOnly := p.Terms()
	priceOnly.PriceCents = 7000
	require.NoError(t, p.ChangeFrom(from, priceOnly, now))
	p = commit(t, p)
	after := all(p)
	require.Equal(t, dates(before), dates(after), "an unchanged recurrence keeps every date")
	for i, v := range after {
		if v.Date.Before(from) {
			require.Equal(t, before[i], v)
		} else {
			require.Equal(t, before[i].Key, v.Key)
			require.Equal(t, int64(7000), v.PriceCents)
		}
	}

	tuesdays := weekly(t, "2027-02-01", time.Tuesday)
	tuesdays.Window = plan.Window{Start: civil.At(14, 0), End: civil.At(15, 30)}
	tuesdays.PriceCents = 6000
	require.NoError(t, p.ChangeFrom(from, tuesdays, now))
	p = commit(t, p)
	changed := all(p)
	require.Equal(t, []string{"2027-01-04", "2027-01-11", "2027-01-18", "2027-01-25", "2027-02-02", "2027-02-09"}, dates(changed)[:6])
	require.Equal(t, before[:4], changed[:4], "visits before the change are untouched")
	require.Equal(t, "2027-02-02T14:00:00Z", changed[4].StartAt.Format(time.RFC3339))
	require.Equal(t, 90*time.Minute, changed[4].EndAt.Sub(changed[4].StartAt))
	require.Equal(t, int64(6000), changed[4].PriceCents)

	require.NoError(t, p.ChangeFrom(day(t, "2027-02-09"), tuesdays, now), "the same terms again")
	require.Empty(t, p.Changes(), "change nothing, record nothing")

	// The same terms from an earlier visit are a change: that visit on.
	require.NoError(t, p.ChangeFrom(day(t, "2027-01-18"), tuesdays, now))
	require.Len(t, p.Changes(), 1)
	p = commit(t, p)
	require.Equal(t, []string{"2027-01-04", "2027-01-11", "2027-02-02"}, dates(all(p))[:3])

	require.Equal(t, plan.RuleNoSuchVisit, ruleOf(t, p.ChangeFrom(day(t, "2027-01-18"), priceOnly, now)), "that visit is gone")

	// A change from an earlier visit replaces the later changes.
	require.NoError(t, p.ChangeFrom(day(t, "2027-01-11"), priceOnly, now))
	p = commit(t, p)
	require.Equal(t, dates(before), dates(all(p)))
}

func ruleOf(t *testing.T, err error) string {
	t.Helper()
	var r *apperr.RuleError
	require.ErrorAs(t, err, &r)
	return r.Rule
}

func TestChangeFromRefuses(t *testing.T) {
	p := newPlan(t, "Europe/London", weekly(t, "2027-01-04", time.Monday))
	terms := p.Terms()
	terms.PriceCents++

	require.Equal(t, plan.RuleNoSuchVisit, ruleOf(t, p.ChangeFrom(day(t, "2027-01-05"), terms, now)))
	// The visit of 2027-01-04 started at 09:00 London time.
	started := time.Date(2027, 1, 4, 9, 0, 0, 0, time.UTC)
	require.Equal(t, plan.RuleVisitStarted, ruleOf(t, p.ChangeFrom(day(t, "2027-01-04"), terms, started)))
	require.NoError(t, p.ChangeFrom(day(t, "2027-01-04"), terms, started.Add(-time.Minute)))

	// A later visit moved before now has started: a change from an earlier
	// date would re-plan it.
	p = newPlan(t, "Europe/London", weekly(t, "2027-01-04", time.Monday))
	require.NoError(t, p.Move(day(t, "2027-02-01"), day(t, "2027-01-05"), civil.At(8, 0), now))
	p = commit(t, p)
	jan6 := time.Date(2027, 1, 6, 0, 0, 0, 0, time.UTC)
	require.Equal(t, plan.RuleVisitStarted, ruleOf(t, p.ChangeFrom(day(t, "2027-01-11"), terms, jan6)))
	require.NoError(t, p.ChangeFrom(day(t, "2027-02-08"), terms, jan6))

	// A first visit moved after a later one: the later one counts.
	p = newPlan(t, "Europe/London", weekly(t, "2027-01-04", time.Monday))
	require.NoError(t, p.Move(day(t, "2027-01-11"), day(t, "2027-01-30"), civil.At(8, 0), now))
	p = commit(t, p)
	jan19 := time.Date(2027, 1, 19, 0, 0, 0, 0, time.UTC)
	require.Equal(t, plan.RuleVisitStarted, ruleOf(t, p.ChangeFrom(day(t, "2027-01-11"), terms, jan19)))

	none := p.Terms()
	none.Recurrence.Until = dayPtr(t, "2027-01-10")
	require.Equal(t, []string{"recurrence"}, fieldsOf(t, p.ChangeFrom(day(t, "2027-01-11"), none, now)))
	bad := p.Terms()
	bad.Window.End = bad.Window.Start
	require.Equal(t, []string{"window.end"}, fieldsOf(t, p.ChangeFrom(day(t, "2027-01-11"), bad, now)))
	require.Empty(t, p.Changes(), "a refused command records nothing")

	require.NoError(t, p.End(now))
	require.Equal(t, plan.RuleEnded, ruleOf(t, p.ChangeFrom(day(t, "2027-01-18"), terms, now)))
}

func TestSkip(t *testing.T) {
	terms := weekly(t, "2027-01-04", time.Monday)
	terms.Recurrence.Count = 4
	p := newPlan(t, "Europe/London", terms)
	require.NoError(t, p.Skip(day(t, "2027-01-11"), now))
	p = commit(t, p)
	require.Equal(t, []string{"2027-01-04", "2027-01-18", "2027-01-25"}, dates(all(p)), "a skipped visit counts: the plan is not longer")
	require.True(t, p.Skipped(day(t, "2027-01-11")))

	require.NoError(t, p.Skip(day(t, "2027-01-11"), now))
	require.Empty(t, p.Changes(), "skipping again records nothing")
	require.Equal(t, plan.RuleNoSuchVisit, ruleOf(t, p.Skip(day(t, "2027-02-01"), now)), "after the last visit")
	require.Equal(t, plan.RuleVisitStarted, ruleOf(t, p.Skip(day(t, "2027-01-04"), time.Date(2027, 1, 4, 9, 0, 0, 0, time.UTC))))
	require.Equal(t, plan.RuleVisitSkipped, ruleOf(t, p.Move(day(t, "2027-01-11"), day(t, "2027-01-12"), civil.At(9, 0), now)))

	// A skip stays with its date across a change that keeps the date.
	changed := p.Terms()
	changed.PriceCents = 1
	require.NoError(t, p.ChangeFrom(day(t, "2027-01-04"), changed, now))
	p = commit(t, p)
	require.Equal(t, []string{"2027-01-04", "2027-01-18", "2027-01-25"}, dates(all(p)))
}

func TestMove(t *testing.T) {
	p := newPlan(t, "Europe/London", weekly(t, "2027-01-04", time.Monday))
	before := all(p)
	// From March (after the clocks change) to January: the key stays.
	require.NoError(t, p.Move(day(t, "2027-04-05"), day(t, "2027-01-06"), civil.At(7, 30), now))
	p = commit(t, p)
	moved := all(p)
	require.Len(t, moved, len(before))
	require.Equal(t, "2027-01-04", moved[0].Date.String())
	require.Equal(t, "2027-04-05", moved[1].Date.String(), "listed where it moved to")
	require.Equal(t, plan.VisitKey(p.ID(), day(t, "2027-04-05")), moved[1].Key)
	require.True(t, moved[1].Moved)
	require.Equal(t, "2027-01-06T07:30:00Z", moved[1].StartAt.Format(time.RFC3339))
	require.Equal(t, 2*time.Hour, moved[1].EndAt.Sub(moved[1].StartAt))
	jan := p.Visits(time.Date(2027, 1, 6, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 7, 0, 0, 0, 0, time.UTC))
	require.Equal(t, []string{"2027-04-05"}, dates(jan), "a visit moved into a range is in it")
	apr := p.Visits(time.Date(2027, 4, 5, 0, 0, 0, 0, time.UTC), time.Date(2027, 4, 6, 0, 0, 0, 0, time.UTC))
	require.Empty(t, apr, "and no longer where it was")

	// The key and the move survive a change from an earlier visit that
	// keeps the date; the moved visit follows its date's new terms.
	changed := p.Terms()
	changed.PriceCents = 9
	changed.Window.End = civil.At(10, 0)
	require.NoError(t, p.ChangeFrom(day(t, "2027-01-18"), changed, now))
	p = commit(t, p)
	after := all(p)
	require.Equal(t, moved[1].Key, after[1].Key)
	require.Equal(t, moved[1].StartAt, after[1].StartAt)
	require.Equal(t, time.Hour, after[1].EndAt.Sub(after[1].StartAt))
	require.Equal(t, int64(9), after[1].PriceCents)

	require.NoError(t, p.Move(day(t, "2027-04-05"), day(t, "2027-01-06"), civil.At(7, 30), now))
	require.Empty(t, p.Changes(), "the same move again records nothing")
	require.Equal(t, plan.RuleMoveIntoPast, ruleOf(t, p.Move(day(t, "2027-01-11"), day(t, "2026-11-30"), civil.At(9, 0), now)))
	require.Equal(t, plan.RuleNoSuchVisit, ruleOf(t, p.Move(day(t, "2027-01-12"), day(t, "2027-01-13"), civil.At(9, 0), now)))
	require.Equal(t, plan.RuleVisitStarted, ruleOf(t, p.Move(day(t, "2027-04-05"), day(t, "2027-04-05"), civil.At(9, 0),
		time.Date(2027, 1, 6, 8, 0, 0, 0, time.UTC))), "it started where it was moved to")
	require.Equal(t, []string{"to_date", "start"}, fieldsOf(t, p.Move(day(t, "2027-01-11"), civil.Date{}, civil.EndOfDay, now)))
}

func TestPauseResumeEnd(t *testing.T) {
	p := newPlan(t, "Europe/London", weekly(t, "2027-01-04", time.Monday))
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return v
	}
	// Paused after the visit of 18 January started: it stays.
	require.NoError(t, p.Pause(at("2027-01-18T10:00:00Z")))
	require.NoError(t, p.Pause(at("2027-01-19T10:00:00Z")))
	require.Len(t, p.Changes(), 1, "pausing again records nothing")
	p = commit(t, p)
	require.Equal(t, plan.StatusPaused, p.Status())
	require.Equal(t, []string{"2027-01-04", "2027-01-11", "2027-01-18"}, dates(all(p)))

	// Resumed just after the visit of 8 February would have started.
	require.NoError(t, p.Resume(at("2027-02-08T09:00:01Z")))
	p = commit(t, p)
	require.Equal(t, plan.StatusActive, p.Status())
	require.Equal(t, []string{"2027-01-04", "2027-01-11", "2027-01-18", "2027-02-15", "2027-02-22"}, dates(all(p))[:5])
	require.NoError(t, p.Resume(at("2027-02-09T00:00:00Z")))
	require.Empty(t, p.Changes(), "resuming an active plan records nothing")

	require.NoError(t, p.End(at("2027-02-22T09:00:00Z")))
	p = commit(t, p)
	require.Equal(t, plan.StatusEnded, p.Status())
	require.Equal(t, []string{"2027-01-04", "2027-01-11", "2027-01-18", "2027-02-15"}, dates(all(p)), "the visit at the end is not kept")
	require.NoError(t, p.End(now))
	require.Empty(t, p.Changes(), "ending again records nothing")
	for name, err := range map[string]error{
		"pause":  p.Pause(now),
		"resume": p.Resume(now),
		"skip":   p.Skip(day(t, "2027-03-01"), now),
		"move":   p.Move(day(t, "2027-03-01"), day(t, "2027-03-02"), civil.At(9, 0), now),
	} {
		require.Equal(t, plan.RuleEnded, ruleOf(t, err), name)
	}

	// Ending a paused plan closes the pause.
	p = newPlan(t, "Europe/London", weekly(t, "2027-01-04", time.Monday))
	require.NoError(t, p.Pause(at("2027-01-05T00:00:00Z")))
	require.NoError(t, p.End(at("2027-01-20T00:00:00Z")))
	p = commit(t, p)
	require.Equal(t, []string{"2027-01-04"}, dates(all(p)))
}

func TestDecodeAndRehydrate(t *testing.T) {
	require.Equal(t, []string{"ServicePlanChanged", "ServicePlanCreated", "ServicePlanEnded", "ServicePlanPaused",
		"ServicePlanResumed", "ServicePlanVisitMoved", "ServicePlanVisitSkipped"}, plan.EventTypes())
	_, err := plan.Decode("ServicePlanExploded", []byte(`{}`))
	require.Error(t, err)
	_, err = plan.Decode("ServicePlanVisitMoved", []byte(`{"date":"2027-02-30"}`))
	require.Error(t, err, "a date that does not exist")
	_, err = plan.Decode("ServicePlanVisitMoved", []byte(`{"date":"2027-02-03","to_start":"25:00"}`))
	require.Error(t, err, "a time of day that does not exist")
	_, err = plan.Rehydrate([]event.Event{plan.Ended{At: now}})
	require.Error(t, err)
	_, err = plan.Rehydrate([]event.Event{plan.Created{PlanID: uuid.New(), TimeZone: "Mars/Olympus"}})
	require.ErrorContains(t, err, "Mars/Olympus")

	p := newPlan(t, "Europe/London", weekly(t, "2027-01-04", time.Monday))
	require.Equal(t, 1, p.Version())
	require.Equal(t, "Europe/London", p.TimeZone())
	created := histories[p][0].(plan.Created)
	require.Equal(t, []time.Weekday{time.Monday}, created.Terms.Recurrence.Weekdays)
	b, err := json.Marshal(created)
	require.NoError(t, err)
	require.Contains(t, string(b), `"window":{"start":"09:00","end":"11:00"}`)
	require.Contains(t, string(b), `"start":"2027-01-04"`)
}

// Terms hands out a copy: changing it changes no visit.
func TestTermsIsACopy(t *testing.T) {
	terms := weekly(t, "2027-01-04", time.Monday, time.Friday)
	terms.Recurrence.Until = dayPtr(t, "2027-02-01")
	p := newPlan(t, "Europe/London", terms)
	before := all(p)
	got := p.Terms()
	*got.Recurrence.Until = day(t, "2027-12-31")
	got.Recurrence.Weekdays[0] = time.Sunday
	require.Equal(t, before, all(p))
}

// A plan's dates lie within HorizonDays of today, and a change's
// recurrence starts no earlier than the plan's: every question put to a
// plan walks its dates from its start, so a date near the year 9999 (or a
// start in the year 1) would cost millions of steps on every read, and in
// the visit generator that serves every merchant.
func TestPlanDatesStayWithinTheHorizon(t *testing.T) {
	today := civil.DateOf(now, time.UTC)
	last, past := today.AddDays(plan.HorizonDays), today.AddDays(plan.HorizonDays+1)
	far := weekly(t, past.String(), past.Weekday())
	_, err := plan.New(plan.NewPlan{ID: uuid.New(), CustomerID: uuid.New(), CatalogItemID: uuid.New(), TimeZone: "UTC", Terms: far}, now)
	require.Equal(t, []string{"recurrence.start"}, fieldsOf(t, err))
	newPlan(t, "UTC", weekly(t, last.String(), last.Weekday())) // the last day is within

	daily := weekly(t, "2027-01-04", time.Monday)
	daily.Recurrence = plan.Recurrence{Frequency: plan.Daily, Interval: 1, Start: day(t, "2027-01-04")}
	p := newPlan(t, "UTC", daily)
	require.Equal(t, []string{"date"}, fieldsOf(t, p.Skip(past, now)))
	require.Equal(t, []string{"date"}, fieldsOf(t, p.Move(past, day(t, "2027-02-01"), civil.At(9, 0), now)))
	require.Equal(t, []string{"to_date"}, fieldsOf(t, p.Move(day(t, "2027-01-05"), past, civil.At(9, 0), now)))
	require.Equal(t, []string{"from"}, fieldsOf(t, p.ChangeFrom(past, daily, now)))
	early := daily
	early.Recurrence.Start = day(t, "0001-01-01")
	require.Equal(t, []string{"recurrence.start"}, fieldsOf(t, p.ChangeFrom(day(t, "2027-01-05"), early, now)))
	require.NoError(t, p.Skip(last, now))
	require.Len(t, p.Changes(), 1, "only the skip within the horizon")
}

// daily is a plan of a visit a day from 2 December 2026, 09:00-11:00 UTC.
func daily(t *testing.T) *plan.Plan {
	t.Helper()
	terms := weekly(t, "2026-12-02")
	terms.Recurrence = plan.Recurrence{Frequency: plan.Daily, Interval: 1, Start: day(t, "2026-12-02")}
	return newPlan(t, "UTC", terms)
}

// withMoves moves the first n visits of a daily plan to 10:00 the same day.
func withMoves(t *testing.T, n int) *plan.Plan {
	t.Helper()
	p := daily(t)
	d := day(t, "2026-12-02")
	for i := range n {
		require.NoError(t, p.Move(d.AddDays(i), d.AddDays(i), civil.At(10, 0), now))
	}
	return commit(t, p)
}

// A visits read costs its range, not the plan's moved visits: it works out
// the same dates with a hundred moved visits as with the most a plan may
// have (each moved visit used to be found by walking its recurrence from
// the start: moves x dates, on every read and in each transaction of the
// visit generator). Counted in dates worked out, not timed.
func TestVisitsReadCostsItsRangeNotThePlansMovedVisits(t *testing.T) {
	few, many := withMoves(t, 100), withMoves(t, plan.MaxMovedVisits)
	eightWeeks := func(p *plan.Plan) (visits []plan.Visit, steps int) {
		steps = plan.CountSteps(func() { visits = p.Visits(now, now.Add(8*7*24*time.Hour)) })
		return visits, steps
	}
	fewVisits, fewSteps := eightWeeks(few)
	manyVisits, manySteps := eightWeeks(many)
	require.Len(t, manyVisits, 55)
	require.Equal(t, dates(fewVisits), dates(manyVisits))
	require.Equal(t, fewSteps, manySteps, "the work of a read does not grow with the plan's moved visits")
	require.LessOrEqual(t, manySteps, 3*58, "a few steps per date of the range")

	// Looking a visit up by its key, and the first visit from a date on (a
	// change's check), cost no walk either.
	key := plan.VisitKey(many.ID(), day(t, "2027-06-01"))
	steps := plan.CountSteps(func() {
		v, ok := many.VisitByKey(key)
		require.True(t, ok)
		require.True(t, v.Moved)
	})
	require.LessOrEqual(t, steps, 2)
	terms := many.Terms()
	terms.PriceCents++
	steps = plan.CountSteps(func() { require.NoError(t, many.ChangeFrom(day(t, "2027-06-01"), terms, now)) })
	// (A change looks at the moved visits dated from on twice, under the
	// old terms and the new: a few tests each, not a walk from the start.)
	require.Less(t, steps, 5*plan.MaxMovedVisits, "linear in the moved visits, no walk from the start for each")
}

// A plan changed many times reads its later visits at the cost of the
// range: the segments that end before it are not walked.
func TestVisitsReadCostsItsRangeNotThePlansChanges(t *testing.T) {
	once, often := daily(t), daily(t)
	d := day(t, "2026-12-02")
	for i := range 150 {
		terms := often.Terms()
		terms.PriceCents = int64(1000 + i)
		require.NoError(t, often.ChangeFrom(d.AddDays(i), terms, now))
	}
	terms := once.Terms()
	terms.PriceCents = 1149
	require.NoError(t, once.ChangeFrom(d.AddDays(149), terms, now))
	once, often = commit(t, once), commit(t, often)
	from := now.AddDate(0, 0, 200)
	read := func(p *plan.Plan) (visits []plan.Visit, steps int) {
		steps = plan.CountSteps(func() { visits = p.Visits(from, from.Add(8*7*24*time.Hour)) })
		return visits, steps
	}
	onceVisits, onceSteps := read(once)
	oftenVisits, oftenSteps := read(often)
	require.Equal(t, dates(onceVisits), dates(oftenVisits))
	require.Equal(t, onceSteps, oftenSteps)
}

// A plan may move at most plan.MaxMovedVisits visits and take
// plan.MaxChanges changes (422 naming the field): a plan is loaded whole
// for every question put to it.
func TestMovesAndChangesAreBounded(t *testing.T) {
	p := withMoves(t, plan.MaxMovedVisits)
	d := day(t, "2026-12-02")
	next := d.AddDays(plan.MaxMovedVisits)
	require.Equal(t, []string{"date"}, fieldsOf(t, p.Move(next, next, civil.At(12, 0), now)))
	require.NoError(t, p.Move(d, d, civil.At(12, 0), now), "moving a moved visit again is no new moved visit")

	p = daily(t)
	for i := range plan.MaxChanges {
		terms := p.Terms()
		terms.PriceCents = int64(1000 + i)
		require.NoError(t, p.ChangeFrom(d.AddDays(i), terms, now))
	}
	p = commit(t, p)
	terms := p.Terms()
	terms.PriceCents++
	require.Equal(t, []string{"from"}, fieldsOf(t, p.ChangeFrom(d.AddDays(plan.MaxChanges), terms, now)))
}

// BenchmarkVisitsOfAPlanWithManyMovedVisits reads eight weeks of visits of
// a daily plan whose plan.MaxMovedVisits first visits moved (go test -bench).
func BenchmarkVisitsOfAPlanWithManyMovedVisits(b *testing.B) {
	terms := plan.Terms{PriceCents: 5000, Window: plan.Window{Start: civil.At(9, 0), End: civil.At(11, 0)},
		Recurrence: plan.Recurrence{Frequency: plan.Daily, Interval: 1, Start: civil.Date{Year: 2026, Month: 12, Day: 2}}}
	p, err := plan.New(plan.NewPlan{ID: uuid.New(), CustomerID: uuid.New(), CatalogItemID: uuid.New(), TimeZone: "UTC", Terms: terms}, now)
	require.NoError(b, err)
	d := terms.Recurrence.Start
	for i := range plan.MaxMovedVisits {
		require.NoError(b, p.Move(d.AddDays(i), d.AddDays(i), civil.At(10, 0), now))
	}
	for b.Loop() {
		p.Visits(now, now.Add(8*7*24*time.Hour))
	}
}

// A change from a visit on may not put a visit dated from on at a start
// that has passed: at 10:00, moving today's 15:00 visit (not started yet)
// and the following ones to 08:00 is refused (RuleMoveIntoPast), as a move
// into the past is, rather than losing today's visit unnoticed. From
// tomorrow on, or to a later hour, the change is taken.
func TestChangeFromRefusesToPutAVisitInThePast(t *testing.T) {
	today := civil.DateOf(now, time.UTC) // now is 10:00 UTC
	terms := weekly(t, today.String())
	terms.Window = plan.Window{Start: civil.At(15, 0), End: civil.At(16, 0)}
	terms.Recurrence = plan.Recurrence{Frequency: plan.Daily, Interval: 1, Start: today}
	p := newPlan(t, "UTC", terms)
	require.Equal(t, today, p.Visits(now, now.Add(24*time.Hour))[0].Date, "today's 15:00 visit is to come")

	early := terms
	early.Window = plan.Window{Start: civil.At(8, 0), End: civil.At(9, 0)}
	require.Equal(t, plan.RuleMoveIntoPast, ruleOf(t, p.ChangeFrom(today, early, now)))
	require.Empty(t, p.Changes(), "nothing recorded")
	require.Equal(t, today, p.Visits(now, now.Add(24*time.Hour))[0].Date)

	require.NoError(t, p.ChangeFrom(today.AddDays(1), early, now))
	later := terms
	later.Window = plan.Window{Start: civil.At(10, 30), End: civil.At(11, 30)}
	require.NoError(t, p.ChangeFrom(today, later, now))
	p = commit(t, p)
	visits := p.Visits(now, now.Add(48*time.Hour))
	require.Equal(t, []string{today.String(), today.AddDays(1).String()}, dates(visits))
	require.Equal(t, time.Date(2026, 12, 1, 10, 30, 0, 0, time.UTC), visits[0].StartAt)
	require.Equal(t, time.Date(2026, 12, 2, 10, 30, 0, 0, time.UTC), visits[1].StartAt,
		"the change from today on replaced the one from tomorrow on")
}

// A plan's moves, a moved visit moved again included, and its pauses are
// bounded too: each is an event of a plan that is loaded whole for every
// question put to it (each transaction of the visit generator, which serves
// every merchant, included), and moving one visit back and forth, or
// pausing and resuming, would otherwise grow it without end. At most 2,000
// moves (422 naming date, as past plan.MaxMovedVisits) and 200 pauses (422
// service_plan.too_many_pauses).
func TestMovesAgainAndPausesAreBounded(t *testing.T) {
	p := daily(t)
	d := day(t, "2026-12-02")
	for i := range 2000 {
		require.NoError(t, p.Move(d, d, civil.At(10+i%2, 0), now))
	}
	p = commit(t, p)
	require.Equal(t, []string{"date"}, fieldsOf(t, p.Move(d, d, civil.At(12, 0), now)))
	require.Equal(t, []string{"date"}, fieldsOf(t, p.Move(d.AddDays(1), d.AddDays(1), civil.At(12, 0), now)))
	require.NoError(t, p.Move(d, d, civil.At(11, 0), now), "restating where a visit is moves nothing")
	require.NoError(t, p.Skip(d.AddDays(1), now), "skips are bounded by the horizon's dates")

	p = daily(t)
	for range 200 {
		require.NoError(t, p.Pause(now))
		require.NoError(t, p.Resume(now))
	}
	p = commit(t, p)
	var rule *apperr.RuleError
	require.ErrorAs(t, p.Pause(now), &rule)
	require.Equal(t, "service_plan.too_many_pauses", rule.Rule)
	require.NoError(t, p.End(now), "a plan can always end")
}

// A plan keeps the zone it was created in, and plans created before the
// API refused names that are no IANA zone of their own may hold one: the
// machine's zone ("Local", "localtime"), a posix/ or right/ copy (the
// latter's clock some 27 seconds off), another spelling. Read back, such a
// plan's visits must not depend on the machine that reads them (an API
// instance and a worker in other zones would disagree on every visit):
// each name is read as migration eventstore/026 reads a merchant's, the
// machine's zone as UTC. Not parallel: it sets time.Local.
func TestStoredZonesDoNotDependOnTheMachine(t *testing.T) {
	chatham, err := time.LoadLocation("Pacific/Chatham")
	require.NoError(t, err)
	saved := time.Local
	time.Local = chatham
	t.Cleanup(func() { time.Local = saved })

	visits := func(zone string) []string {
		t.Helper()
		created := plan.Created{PlanID: "5f0c2b9e-4a51-4a8e-9d3c-2b7b1b0e6a11", CustomerID: uuid.New(), CatalogItemID: uuid.New(),
			TimeZone: zone, Terms: weekly(t, "2027-03-22", time.Tuesday)}
		p, err := plan.Rehydrate([]event.Event{created})
		require.NoError(t, err, zone)
		var starts []string
		for _, v := range p.Visits(now, now.AddDate(1, 0, 0)) {
			starts = append(starts, v.StartAt.UTC().Format(time.RFC3339))
		}
		return starts
	}
	utc, london := visits("UTC"), visits("Europe/London")
	require.NotEqual(t, utc, london)
	for _, zone := range []string{"Local", "localtime", "posixrules", "", "/etc/localtime", "../UTC"} {
		require.Equal(t, utc, visits(zone), "%q is read as UTC, whatever the machine's zone", zone)
	}
	for _, zone := range []string{"posix/Europe/London", "right/Europe/London", "Europe//London", "./Europe/London", "Europe/London/"} {
		require.Equal(t, london, visits(zone), "%q is read as Europe/London", zone)
	}
}

// StartOf answers where a visit starts, moved or not, also once the plan no
// longer has it (skipped, or after the end); not for a date the plan's
// recurrence does not give.
func TestStartOfAVisitThePlanNoLongerHas(t *testing.T) {
	t.Parallel()
	p := newPlan(t, "UTC", weekly(t, "2026-12-08", time.Tuesday))
	key := plan.VisitKey(p.ID(), day(t, "2026-12-08"))
	require.NoError(t, p.Move(day(t, "2026-12-08"), day(t, "2026-12-10"), civil.At(14, 0), now))
	require.NoError(t, p.Skip(day(t, "2026-12-08"), now))
	p = commit(t, p)
	_, has := p.VisitByKey(key)
	require.False(t, has)
	at, ok := p.StartOf(key)
	require.True(t, ok)
	require.Equal(t, time.Date(2026, 12, 10, 14, 0, 0, 0, time.UTC), at)
	require.NoError(t, p.End(now))
	at, ok = p.StartOf(plan.VisitKey(p.ID(), day(t, "2026-12-15")))
	require.True(t, ok, "after the end too")
	require.Equal(t, time.Date(2026, 12, 15, 9, 0, 0, 0, time.UTC), at)
	_, ok = p.StartOf(plan.VisitKey(p.ID(), day(t, "2026-12-16")))
	require.False(t, ok, "a Wednesday is no visit of the plan")
	_, ok = p.StartOf(plan.VisitKey(uuid.New(), day(t, "2026-12-15")))
	require.False(t, ok, "another plan's key")
}
