package availability_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/availability"
	"hearth/domain/civil"
)

func clocks(loc *time.Location, slots []availability.Slot) []string {
	var out []string
	for _, s := range slots {
		out = append(out, s.StaffID+" "+s.Start.In(loc).Format("01-02 15:04 MST")+"-"+s.End.In(loc).Format("15:04"))
	}
	return out
}

func at(loc *time.Location, date string, h, m int) time.Time {
	d, err := civil.ParseDate(date)
	if err != nil {
		panic(err)
	}
	return civil.Resolve(d, civil.At(h, m), loc)
}

// One Monday, 09:00-12:00 with a job at 10:00-10:30: the buffer keeps the
// time either side of the job free, time off has none.
func TestSlotsExample(t *testing.T) {
	london := zone(t, "Europe/London")
	var w availability.Week
	w[time.Monday] = []availability.Shift{shift(9, 0, 12, 0)}
	h := hours(t, w)
	job := []availability.Interval{{at(london, "2027-01-04", 10, 0), at(london, "2027-01-04", 10, 30)}}
	q := availability.Query{From: at(london, "2027-01-04", 0, 0), To: at(london, "2027-01-05", 0, 0),
		Duration: time.Hour, Step: 30 * time.Minute, TimeZone: "Europe/London", Limit: 10}
	run := func(q availability.Query, s availability.Staff) []string {
		t.Helper()
		s.ID, s.Hours = "ann", h
		page, err := availability.Slots(q, []availability.Staff{s})
		require.NoError(t, err)
		require.Empty(t, page.Next)
		return clocks(london, page.Slots)
	}
	require.Equal(t, []string{"ann 01-04 09:00 GMT-10:00", "ann 01-04 10:30 GMT-11:30", "ann 01-04 11:00 GMT-12:00"},
		run(q, availability.Staff{Busy: job}))
	q.Buffer = 15 * time.Minute
	require.Equal(t, []string{"ann 01-04 11:00 GMT-12:00"}, run(q, availability.Staff{Busy: job}), "09:00 ends in the buffer, 10:30 starts in it")
	require.Equal(t, []string{"ann 01-04 09:00 GMT-10:00", "ann 01-04 10:30 GMT-11:30", "ann 01-04 11:00 GMT-12:00"},
		run(q, availability.Staff{TimeOff: job}), "no buffer around time off")
	q.From = at(london, "2027-01-04", 9, 1)
	q.To = at(london, "2027-01-04", 11, 59)
	q.Buffer = 0
	require.Equal(t, []string{"ann 01-04 10:30 GMT-11:30"}, run(q, availability.Staff{Busy: job}), "within [from, to)")
}

// The grid is the local clock's: on the days the clocks change, slots
// start at the local times the step gives, and the same local time twice
// when the clocks show it twice.
func TestSlotsFollowTheLocalClock(t *testing.T) {
	var w availability.Week
	w[time.Sunday] = []availability.Shift{shift(0, 0, 4, 0)}
	w[time.Monday] = []availability.Shift{shift(9, 0, 11, 0)}
	h := hours(t, w)
	cases := []struct {
		zone, sunday string
		step         time.Duration
		want         []string
	}{
		{"Europe/London", "2027-03-28", time.Hour, []string{"00:00 GMT", "02:00 BST", "03:00 BST"}},
		{"Europe/London", "2027-10-31", time.Hour, []string{"00:00 BST", "01:00 BST", "01:00 GMT", "02:00 GMT", "03:00 GMT"}},
		// A step the change is no multiple of: the grid starts again with
		// the new offset, 01:30 GMT right after 01:30 BST.
		{"Europe/London", "2027-10-31", 90 * time.Minute, []string{"00:00 BST", "01:30 BST", "01:30 GMT", "03:00 GMT"}},
		{"Australia/Sydney", "2027-10-03", time.Hour, []string{"00:00 AEST", "01:00 AEST", "03:00 AEDT"}},
		{"Australia/Sydney", "2027-04-04", time.Hour, []string{"00:00 AEDT", "01:00 AEDT", "02:00 AEDT", "02:00 AEST", "03:00 AEST"}},
		// Lord Howe goes back half an hour, 02:00 to 01:30.
		{"Australia/Lord_Howe", "2027-04-04", time.Hour, []string{"00:00 +11", "01:00 +11", "02:00 +1030", "03:00 +1030"}},
		{"Asia/Kathmandu", "2027-01-03", time.Hour, []string{"00:00 +0545", "01:00 +0545", "02:00 +0545", "03:00 +0545"}},
	}
	for _, c := range cases {
		t.Run(c.zone+"/"+c.sunday, func(t *testing.T) {
			loc := zone(t, c.zone)
			q := availability.Query{From: at(loc, c.sunday, 0, 0), To: at(loc, c.sunday, 23, 0),
				Duration: time.Hour, Step: c.step, TimeZone: c.zone, Limit: 50}
			page, err := availability.Slots(q, []availability.Staff{{ID: "ann", Hours: h}})
			require.NoError(t, err)
			var got []string
			for _, s := range page.Slots {
				got = append(got, s.Start.In(loc).Format("15:04 MST"))
				require.Equal(t, time.Hour, s.End.Sub(s.Start))
			}
			require.Equal(t, c.want, got)
			monday, _ := civil.ParseDate(c.sunday)
			q.From, q.To = civil.Resolve(monday.AddDays(1), 0, loc), civil.Resolve(monday.AddDays(2), 0, loc)
			page, err = availability.Slots(q, []availability.Staff{{ID: "ann", Hours: h}})
			require.NoError(t, err)
			require.NotEmpty(t, page.Slots)
			require.Equal(t, "09:00", page.Slots[0].Start.In(loc).Format("15:04"), "09:00 the day after the change")
		})
	}
}

func TestSlotsFiltersAndOrder(t *testing.T) {
	london := zone(t, "Europe/London")
	h := hours(t, officeWeek())
	staff := []availability.Staff{
		{ID: "bob", Hours: h, CatalogItems: []string{"windows"}},
		{ID: "ann", Hours: h, CatalogItems: []string{"gutters", "windows"}},
	}
	q := availability.Query{From: at(london, "2027-01-04", 9, 0), To: at(london, "2027-01-04", 10, 0),
		Duration: 30 * time.Minute, Step: 30 * time.Minute, TimeZone: "Europe/London", Limit: 10}
	page, err := availability.Slots(q, staff)
	require.NoError(t, err)
	require.Equal(t, []string{"ann 01-04 09:00 GMT-09:30", "bob 01-04 09:00 GMT-09:30", "ann 01-04 09:30 GMT-10:00", "bob 01-04 09:30 GMT-10:00"},
		clocks(london, page.Slots), "by start, then staff id")
	q.StaffID = "bob"
	page, err = availability.Slots(q, staff)
	require.NoError(t, err)
	require.Equal(t, []string{"bob 01-04 09:00 GMT-09:30", "bob 01-04 09:30 GMT-10:00"}, clocks(london, page.Slots))
	q.StaffID, q.CatalogItemID = "", "gutters"
	page, err = availability.Slots(q, staff)
	require.NoError(t, err)
	require.Equal(t, []string{"ann 01-04 09:00 GMT-09:30", "ann 01-04 09:30 GMT-10:00"}, clocks(london, page.Slots))

	q.CatalogItemID, q.Limit = "", 3
	page, err = availability.Slots(q, staff)
	require.NoError(t, err)
	require.Len(t, page.Slots, 3)
	q.Cursor = page.Next
	page, err = availability.Slots(q, staff)
	require.NoError(t, err)
	require.Equal(t, []string{"bob 01-04 09:30 GMT-10:00"}, clocks(london, page.Slots))
	require.Empty(t, page.Next)
}

func TestSlotsRejectBadInput(t *testing.T) {
	good := func() availability.Query {
		from := time.Date(2027, 1, 4, 0, 0, 0, 0, time.UTC)
		return availability.Query{From: from, To: from.Add(24 * time.Hour), Duration: time.Hour, Step: 15 * time.Minute,
			TimeZone: "Europe/London", Limit: 10}
	}
	cases := []struct {
		name   string
		change func(*availability.Query)
		fields []string
	}{
		{"duration 0", func(q *availability.Query) { q.Duration = 0 }, []string{"duration"}},
		{"duration over a day", func(q *availability.Query) { q.Duration = 24*time.Hour + time.Minute }, []string{"duration"}},
		{"duration a day", func(q *availability.Query) { q.Duration = 24 * time.Hour }, nil},
		{"duration in seconds", func(q *availability.Query) { q.Duration = 90 * time.Second }, []string{"duration"}},
		{"negative buffer", func(q *availability.Query) { q.Buffer = -time.Minute }, []string{"buffer"}},
		{"step that does not divide a day", func(q *availability.Query) { q.Step = 7 * time.Minute }, []string{"step"}},
		{"no step", func(q *availability.Query) { q.Step = 0 }, []string{"step"}},
		{"to before from", func(q *availability.Query) { q.To = q.From }, []string{"to"}},
		{"a range too long", func(q *availability.Query) { q.To = q.From.Add(availability.MaxRange + time.Minute) }, []string{"to"}},
		// 31 days on the local clock, with the clocks going back in them:
		// October in London lasts 31 days and an hour, and is one query.
		{"a month of 31 days with a change of the clocks", func(q *availability.Query) {
			q.From, q.To = time.Date(2027, 9, 30, 23, 0, 0, 0, time.UTC), time.Date(2027, 11, 1, 0, 0, 0, 0, time.UTC)
		}, nil},
		{"31 days and a minute on the local clock", func(q *availability.Query) {
			q.From, q.To = time.Date(2027, 9, 30, 23, 0, 0, 0, time.UTC), time.Date(2027, 11, 1, 0, 1, 0, 0, time.UTC)
		}, []string{"to"}},
		{"no range", func(q *availability.Query) { q.From, q.To = time.Time{}, time.Time{} }, []string{"from", "to"}},
		{"no from: to is not named too", func(q *availability.Query) { q.From = time.Time{} }, []string{"from"}},
		{"unknown time zone", func(q *availability.Query) { q.TimeZone = "Europe/Atlantis" }, []string{"time_zone"}},
		{"limit 0", func(q *availability.Query) { q.Limit = 0 }, []string{"limit"}},
		{"limit too big", func(q *availability.Query) { q.Limit = availability.MaxLimit + 1 }, []string{"limit"}},
		{"bad cursor", func(q *availability.Query) { q.Cursor = "!!" }, []string{"cursor"}},
		{"forged cursor", func(q *availability.Query) { q.Cursor = "eA" }, []string{"cursor"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := good()
			c.change(&q)
			_, err := availability.Slots(q, nil)
			if c.fields == nil {
				require.NoError(t, err)
				return
			}
			require.Equal(t, c.fields, fields(t, err))
		})
	}
}

// rawStaff is a random staff member's calendar as the generator wrote it,
// for the oracle: it reads the pattern and exceptions itself.
type rawStaff struct {
	week       availability.Week
	exceptions map[civil.Date][]availability.Shift
}

var dstSundays = map[string][]string{
	"Europe/London":       {"2027-03-28", "2027-10-31"},
	"Australia/Sydney":    {"2027-04-04", "2027-10-03"},
	"America/New_York":    {"2027-03-14", "2027-11-07"},
	"Australia/Lord_Howe": {"2027-04-04", "2027-10-03"},
	"Asia/Kathmandu":      {"2027-06-06"},
	"UTC":                 {"2027-06-06"},
}

func randomShifts(rng *rand.Rand) []availability.Shift {
	if rng.IntN(12) == 0 {
		return []availability.Shift{{Start: 0, End: civil.EndOfDay}}
	}
	grain := []int{1, 15, 30, 60}[rng.IntN(4)]
	var cuts []int
	for range 2 * rng.IntN(4) {
		c := rng.IntN(1441)
		if rng.IntN(3) == 0 {
			c = rng.IntN(241) // the hours the clocks change in
		}
		cuts = append(cuts, c/grain*grain)
	}
	slices.Sort(cuts)
	var out []availability.Shift
	for i := 0; i+1 < len(cuts); i += 2 {
		s, e := civil.Clock(cuts[i]), civil.Clock(cuts[i+1])
		if n := len(out); n > 0 && s < out[n-1].End {
			continue
		}
		if s < e && s < civil.EndOfDay {
			out = append(out, availability.Shift{Start: s, End: e})
		}
	}
	return out
}

func randomSpans(rng *rand.Rand, from, to time.Time, n, maxMinutes int) []availability.Interval {
	var out []availability.Interval
	span := int(to.Sub(from)/time.Minute) + 240
	for range rng.IntN(n + 1) {
		s := from.Add(time.Duration(rng.IntN(span)-120) * time.Minute)
		out = append(out, availability.Interval{Start: s, End: s.Add(time.Duration(1+rng.IntN(maxMinutes)) * time.Minute)})
	}
	return out
}

// randomCalendar draws a query and up to four staff members, mostly around
// a day the clocks change.
func randomCalendar(t *testing.T, rng *rand.Rand) (availability.Query, []availability.Staff, []rawStaff) {
	zones := []string{"Europe/London", "Australia/Sydney", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu", "UTC"}
	name := zones[rng.IntN(len(zones))]
	loc := zone(t, name)
	sundays := dstSundays[name]
	base := day(t, sundays[rng.IntN(len(sundays))]).AddDays(-rng.IntN(3))
	if rng.IntN(4) == 0 {
		base = day(t, "2027-01-01").AddDays(rng.IntN(365))
	}
	from := civil.Resolve(base, civil.Clock(rng.IntN(1440)), loc)
	to := from.Add(time.Duration(60+rng.IntN(4*24*60)) * time.Minute)
	step := []int{1, 5, 10, 15, 20, 30, 60, 90, 120, 180}[rng.IntN(10)]
	if step == 1 && to.Sub(from) > 12*time.Hour {
		step = 5
	}
	q := availability.Query{
		From: from, To: to, TimeZone: name,
		Duration: time.Duration([]int{5, 15, 30, 45, 60, 90, 120, 240, 1 + rng.IntN(600)}[rng.IntN(9)]) * time.Minute,
		Buffer:   time.Duration([]int{0, 0, 5, 15, 30, 60}[rng.IntN(6)]) * time.Minute,
		Step:     time.Duration(step) * time.Minute,
		Limit:    []int{1 + rng.IntN(20), 50 + rng.IntN(200)}[rng.IntN(2)],
	}
	ids := []string{"d", "b", "c", "a"}[:1+rng.IntN(4)]
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	switch rng.IntN(5) {
	case 0:
		q.StaffID = []string{"a", "b", "zz"}[rng.IntN(3)]
	case 1:
		q.CatalogItemID = "gutters"
	}
	var staff []availability.Staff
	var raws []rawStaff
	for _, id := range ids {
		r := rawStaff{exceptions: map[civil.Date][]availability.Shift{}}
		for wd := range r.week {
			if rng.IntN(4) > 0 {
				r.week[wd] = randomShifts(rng)
			}
		}
		var ex []availability.Exception
		for d := civil.DateOf(from, loc).AddDays(-1); !d.After(civil.DateOf(to, loc).AddDays(1)); d = d.AddDays(1) {
			switch rng.IntN(6) {
			case 0:
				ex = append(ex, availability.Exception{Date: d, Reason: []availability.Reason{availability.Holiday, availability.SickDay}[rng.IntN(2)]})
				r.exceptions[d] = nil
			case 1:
				shifts := randomShifts(rng)
				if len(shifts) == 0 {
					continue
				}
				ex = append(ex, availability.Exception{Date: d, Reason: []availability.Reason{availability.ExtraDay, availability.ChangedHours}[rng.IntN(2)], Shifts: shifts})
				r.exceptions[d] = shifts
			}
		}
		h, err := availability.NewWorkingHours(r.week, ex)
		require.NoError(t, err)
		var items []string
		if rng.IntN(2) == 0 {
			items = []string{"gutters"}
		}
		staff = append(staff, availability.Staff{ID: id, CatalogItems: items, Hours: h,
			TimeOff: randomSpans(rng, from, to, 2, 360), Busy: randomSpans(rng, from, to, 6, 240)})
		raws = append(raws, r)
	}
	return q, staff, raws
}

// oracle lists the slots minute by minute: a minute is good when some shift
// (resolved by civil.Resolve) covers it and no time off or buffered job
// does; a slot starts on a minute the local clock shows on the grid and
// covers only good minutes. Every time in the random calendars is a whole
// minute, so minutes decide.
func oracle(t *testing.T, q availability.Query, staff []availability.Staff, raws []rawStaff) []availability.Slot {
	loc := zone(t, q.TimeZone)
	n := int(q.To.Sub(q.From) / time.Minute)
	minute := func(i int) time.Time { return q.From.Add(time.Duration(i) * time.Minute) }
	in := func(t, a, b time.Time) bool { return !t.Before(a) && t.Before(b) }
	length := int(q.Duration / time.Minute)
	var out []availability.Slot
	for k, s := range staff {
		if q.StaffID != "" && s.ID != q.StaffID || q.CatalogItemID != "" && !slices.Contains(s.CatalogItems, q.CatalogItemID) {
			continue
		}
		good := make([]bool, n)
		for d := civil.DateOf(q.From, loc).AddDays(-2); !d.After(civil.DateOf(q.To, loc).AddDays(1)); d = d.AddDays(1) {
			shifts, ok := raws[k].exceptions[d]
			if !ok {
				shifts = raws[k].week[d.Weekday()]
			}
			for _, sh := range shifts {
				a, b := civil.Resolve(d, sh.Start, loc), civil.Resolve(d, sh.End, loc)
				for i := range n {
					good[i] = good[i] || in(minute(i), a, b)
				}
			}
		}
		for i := range n {
			for _, off := range s.TimeOff {
				good[i] = good[i] && !in(minute(i), off.Start, off.End)
			}
			for _, b := range s.Busy {
				good[i] = good[i] && !in(minute(i), b.Start.Add(-q.Buffer), b.End.Add(q.Buffer))
			}
		}
		sum := make([]int, n+1)
		for i := range n {
			sum[i+1] = sum[i]
			if good[i] {
				sum[i+1]++
			}
		}
		for i := 0; i+length <= n; i++ {
			local := minute(i).In(loc)
			if (local.Hour()*60+local.Minute())%int(q.Step/time.Minute) != 0 || local.Second() != 0 {
				continue
			}
			if sum[i+length]-sum[i] == length {
				out = append(out, availability.Slot{StaffID: s.ID, Start: minute(i), End: minute(i + length)})
			}
		}
	}
	slices.SortFunc(out, func(a, b availability.Slot) int {
		return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.StaffID, b.StaffID))
	})
	return out
}

// Slots, page after page, give exactly the oracle's slots on random
// calendars: random zones (north and south, half-hour and 45-minute
// offsets, a 30-minute change), mostly days the clocks change, random
// shifts (touching, crossing midnight, in the changing hours), exceptions,
// time off, jobs, buffers, steps, durations, filters and page sizes.
func TestSlotsAgainstOracle(t *testing.T) {
	runs := 400
	if testing.Short() {
		runs = 60
	}
	for i := range runs {
		rng := rand.New(rand.NewPCG(uint64(i), 24))
		q, staff, raws := randomCalendar(t, rng)
		want := oracle(t, q, staff, raws)
		var got []availability.Slot
		for pages := 0; ; pages++ {
			require.Less(t, pages, len(want)+2, "run %d: pages do not end", i)
			page, err := availability.Slots(q, staff)
			require.NoError(t, err, "run %d", i)
			require.LessOrEqual(t, len(page.Slots), q.Limit)
			if pages > 0 {
				require.NotEmpty(t, page.Slots, "run %d: a page's Next leads to more slots", i)
			}
			got = append(got, page.Slots...)
			if page.Next == "" {
				break
			}
			require.Len(t, page.Slots, q.Limit, "run %d: only the last page is short", i)
			q.Cursor = page.Next
		}
		if !slices.EqualFunc(want, got, func(a, b availability.Slot) bool {
			return a.StaffID == b.StaffID && a.Start.Equal(b.Start) && a.End.Equal(b.End)
		}) {
			loc := zone(t, q.TimeZone)
			require.Equal(t, clocks(loc, want), clocks(loc, got), "run %d: %s from %s, step %s, duration %s, buffer %s",
				i, q.TimeZone, q.From.In(loc), q.Step, q.Duration, q.Buffer)
		}
	}
}

// With a tiny work budget, pages end early (short, or empty, with a Next)
// but together still hold exactly the oracle's slots: none skipped, none
// repeated, and the pages end, also when a page stops at every chance it
// has (a budget below nothing: each page must still move on).
func TestSlotsAgainstOracleWithPagesEndingEarly(t *testing.T) {
	for _, budget := range []int{1, -1 << 20} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			availability.SetChunkBudget(t, budget)
			slotsAgainstOracleEndingEarly(t)
		})
	}
}

func slotsAgainstOracleEndingEarly(t *testing.T) {
	runs := 200
	if testing.Short() {
		runs = 40
	}
	early := 0
	for i := range runs {
		rng := rand.New(rand.NewPCG(uint64(i), 24))
		q, staff, raws := randomCalendar(t, rng)
		want := oracle(t, q, staff, raws)
		var got []availability.Slot
		for pages := 0; ; pages++ {
			require.Less(t, pages, len(want)+64*len(staff)+2, "run %d: pages do not end", i)
			page, err := availability.Slots(q, staff)
			require.NoError(t, err, "run %d", i)
			require.LessOrEqual(t, len(page.Slots), q.Limit)
			got = append(got, page.Slots...)
			if page.Next == "" {
				break
			}
			if len(page.Slots) < q.Limit {
				early++
			}
			q.Cursor = page.Next
		}
		if !slices.EqualFunc(want, got, func(a, b availability.Slot) bool {
			return a.StaffID == b.StaffID && a.Start.Equal(b.Start) && a.End.Equal(b.End)
		}) {
			loc := zone(t, q.TimeZone)
			require.Equal(t, clocks(loc, want), clocks(loc, got), "run %d: %s from %s, step %s, duration %s, buffer %s",
				i, q.TimeZone, q.From.In(loc), q.Step, q.Duration, q.Buffer)
		}
	}
	require.Positive(t, early, "some pages ended early")
}

// A merchant's staff without free time cost a request its page's work,
// not the range's for every one of them: 300 staff members with no
// working time over 31 days (and one free slot at the end, someone else's)
// are read a bounded number of chunks per page, over as many pages as
// that takes, and the slot is found.
func TestAPageOfSlotsReadsABoundedAmountOfTheCalendar(t *testing.T) {
	london := zone(t, "Europe/London")
	from := civil.Resolve(day(t, "2027-03-01"), 0, london)
	to := from.Add(31 * 24 * time.Hour)
	none, err := availability.NewWorkingHours(availability.Week{}, nil)
	require.NoError(t, err)
	var w availability.Week
	w[time.Monday] = []availability.Shift{shift(9, 0, 10, 0)}
	mondays, err := availability.NewWorkingHours(w, nil)
	require.NoError(t, err)
	staff := make([]availability.Staff, 300)
	for i := range staff {
		staff[i] = availability.Staff{ID: fmt.Sprintf("staff-%03d", i), Hours: none}
	}
	// The last one works on Mondays, and is busy on all but the last.
	last := &staff[len(staff)-1]
	last.Hours = mondays
	for d := day(t, "2027-03-01"); d.Before(day(t, "2027-03-29")); d = d.AddDays(7) {
		start := civil.Resolve(d, civil.At(9, 0), london)
		last.Busy = append(last.Busy, availability.Interval{Start: start, End: start.Add(time.Hour)})
	}
	q := availability.Query{From: from, To: to, Duration: time.Hour, Step: 15 * time.Minute, TimeZone: "Europe/London", Limit: 10}
	reads := availability.CountReads(t)
	var got []availability.Slot
	pages := 0
	for {
		*reads = 0
		page, err := availability.Slots(q, staff)
		require.NoError(t, err)
		require.LessOrEqual(t, *reads, 2000+len(staff)+1, "page %d read more than its budget", pages)
		got = append(got, page.Slots...)
		pages++
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	require.Greater(t, pages, 1, "the range's work took more than one page")
	require.Equal(t, []string{"staff-299 03-29 09:00 BST-10:00"}, clocks(london, got))
	require.Equal(t, last.ID, got[0].StaffID)
}

// BenchmarkAvailability answers the first page, and every page, of two
// weeks of 50 staff members with 500 jobs between them.
func BenchmarkAvailability(b *testing.B) {
	london := zone(b, "Europe/London")
	var w availability.Week
	for d := time.Monday; d <= time.Friday; d++ {
		w[d] = []availability.Shift{shift(8, 0, 12, 0), shift(13, 0, 18, 0)}
	}
	w[time.Saturday] = []availability.Shift{shift(9, 0, 13, 0)}
	h, err := availability.NewWorkingHours(w, []availability.Exception{{Date: day(b, "2027-03-29"), Reason: availability.Holiday}})
	require.NoError(b, err)
	from := civil.Resolve(day(b, "2027-03-22"), 0, london) // across a change of the clocks
	to := from.Add(14 * 24 * time.Hour)
	rng := rand.New(rand.NewPCG(1, 2))
	staff := make([]availability.Staff, 50)
	for i := range staff {
		staff[i] = availability.Staff{ID: fmt.Sprintf("staff-%02d", i), Hours: h, CatalogItems: []string{"windows"}}
	}
	for range 500 {
		s := &staff[rng.IntN(len(staff))]
		start := civil.Resolve(day(b, "2027-03-22").AddDays(rng.IntN(14)), civil.At(8+rng.IntN(9), 15*rng.IntN(4)), london)
		s.Busy = append(s.Busy, availability.Interval{Start: start, End: start.Add(time.Duration(30+30*rng.IntN(6)) * time.Minute)})
	}
	q := availability.Query{From: from, To: to, Duration: time.Hour, Buffer: 15 * time.Minute, Step: 15 * time.Minute,
		TimeZone: "Europe/London", Limit: 100}
	b.Run("first page", func(b *testing.B) {
		for b.Loop() {
			page, err := availability.Slots(q, staff)
			if err != nil || len(page.Slots) != q.Limit {
				b.Fatal(err, len(page.Slots))
			}
		}
	})
	b.Run("every page", func(b *testing.B) {
		q := q
		q.Limit = availability.MaxLimit
		for b.Loop() {
			q.Cursor = ""
			n := 0
			for {
				page, err := availability.Slots(q, staff)
				if err != nil {
					b.Fatal(err)
				}
				n += len(page.Slots)
				if page.Next == "" {
					break
				}
				q.Cursor = page.Next
			}
			b.ReportMetric(float64(n), "slots")
		}
	})
}
