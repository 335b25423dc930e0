package availability_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/apperr"
	"hearth/domain/availability"
	"hearth/domain/civil"
)

func day(t testing.TB, s string) civil.Date {
	t.Helper()
	d, err := civil.ParseDate(s)
	require.NoError(t, err)
	return d
}

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

func shift(h1, m1, h2, m2 int) availability.Shift {
	return availability.Shift{Start: civil.At(h1, m1), End: civil.At(h2, m2)}
}

// officeWeek is Monday to Friday, 09:00-12:00 and 13:00-17:00.
func officeWeek() availability.Week {
	var w availability.Week
	for d := time.Monday; d <= time.Friday; d++ {
		w[d] = []availability.Shift{shift(9, 0, 12, 0), shift(13, 0, 17, 0)}
	}
	return w
}

func fields(t *testing.T, err error) []string {
	t.Helper()
	var v *apperr.ValidationError
	require.ErrorAs(t, err, &v)
	return v.FieldNames()
}

func TestWorkingHoursRejectBadInput(t *testing.T) {
	var w availability.Week
	w[time.Monday] = []availability.Shift{shift(9, 0, 9, 0)}
	w[time.Tuesday] = []availability.Shift{shift(9, 0, 12, 0), shift(11, 0, 14, 0)}
	w[time.Wednesday] = []availability.Shift{{Start: civil.At(20, 0), End: civil.EndOfDay + 60}}
	w[time.Thursday] = []availability.Shift{{Start: civil.EndOfDay, End: civil.EndOfDay}}
	w[time.Friday] = []availability.Shift{shift(9, 0, 12, 0), shift(12, 0, 17, 0)} // touching is fine
	_, err := availability.NewWorkingHours(w, []availability.Exception{
		{Date: day(t, "2027-01-01"), Reason: availability.Holiday, Shifts: []availability.Shift{shift(9, 0, 10, 0)}},
		{Date: day(t, "2027-01-01"), Reason: availability.SickDay},
		{Date: day(t, "2027-01-02"), Reason: availability.ExtraDay},
		{Date: day(t, "2027-01-03"), Reason: "party"},
		{Reason: availability.ChangedHours, Shifts: []availability.Shift{shift(10, 0, 9, 0)}},
		{Date: civil.Date{Year: 2027, Month: 2, Day: 29}, Reason: availability.Holiday},
	})
	require.Equal(t, []string{
		"week.monday[0].end", "week.tuesday[1].start", "week.wednesday[0].end", "week.thursday[0].start",
		"exceptions[0].shifts", "exceptions[1].date", "exceptions[2].shifts", "exceptions[3].reason",
		"exceptions[4].date", "exceptions[4].shifts[0].end", "exceptions[5].date",
	}, fields(t, err))
}

func hours(t *testing.T, w availability.Week, ex ...availability.Exception) availability.WorkingHours {
	t.Helper()
	h, err := availability.NewWorkingHours(w, ex)
	require.NoError(t, err)
	return h
}

func spans(loc *time.Location, is []availability.Interval) []string {
	var out []string
	for _, i := range is {
		out = append(out, i.Start.In(loc).Format("Mon 2006-01-02 15:04 MST")+" - "+i.End.In(loc).Format("15:04 MST"))
	}
	return out
}

func TestIntervals(t *testing.T) {
	london := zone(t, "Europe/London")
	w := officeWeek()
	w[time.Sunday] = []availability.Shift{shift(22, 0, 24, 0)}
	w[time.Monday] = append([]availability.Shift{shift(0, 0, 2, 0)}, w[time.Monday]...)
	h := hours(t, w,
		availability.Exception{Date: day(t, "2027-01-05"), Reason: availability.Holiday},
		availability.Exception{Date: day(t, "2027-01-06"), Reason: availability.SickDay},
		availability.Exception{Date: day(t, "2027-01-07"), Reason: availability.ChangedHours, Shifts: []availability.Shift{shift(10, 0, 14, 0)}},
		availability.Exception{Date: day(t, "2027-01-09"), Reason: availability.ExtraDay, Shifts: []availability.Shift{shift(8, 0, 12, 30)}},
	)
	from := time.Date(2027, 1, 3, 23, 0, 0, 0, time.UTC) // Sunday 23:00, inside a shift: clipped
	to := time.Date(2027, 1, 9, 12, 0, 0, 0, time.UTC)   // Saturday 12:00, inside a shift: clipped
	require.Equal(t, []string{
		"Sun 2027-01-03 23:00 GMT - 02:00 GMT", // Sunday to 24:00 and Monday from 00:00 are one span
		"Mon 2027-01-04 09:00 GMT - 12:00 GMT",
		"Mon 2027-01-04 13:00 GMT - 17:00 GMT",
		// Tuesday a holiday, Wednesday a sick day.
		"Thu 2027-01-07 10:00 GMT - 14:00 GMT",
		"Fri 2027-01-08 09:00 GMT - 12:00 GMT",
		"Fri 2027-01-08 13:00 GMT - 17:00 GMT",
		"Sat 2027-01-09 08:00 GMT - 12:00 GMT",
	}, spans(london, h.Intervals(from, to, london)))
}

// Working hours keep their local times over both changes of the clocks; a
// shift whose ends the clocks skip or repeat follows civil.Resolve.
func TestIntervalsOverDaylightSaving(t *testing.T) {
	var w availability.Week
	w[time.Sunday] = []availability.Shift{shift(0, 30, 3, 30), shift(9, 0, 17, 0)}
	w[time.Saturday] = []availability.Shift{shift(9, 0, 17, 0)}
	h := hours(t, w)
	cases := []struct {
		zone, saturday string
		want           []string
	}{
		{"Europe/London", "2027-03-27", []string{
			"Sat 2027-03-27 09:00 GMT - 17:00 GMT",
			"Sun 2027-03-28 00:30 GMT - 03:30 BST", // two hours: the clocks skip 01:00-02:00
			"Sun 2027-03-28 09:00 BST - 17:00 BST",
		}},
		{"Europe/London", "2027-10-30", []string{
			"Sat 2027-10-30 09:00 BST - 17:00 BST",
			"Sun 2027-10-31 00:30 BST - 03:30 GMT", // four hours: 01:00-02:00 twice
			"Sun 2027-10-31 09:00 GMT - 17:00 GMT",
		}},
		{"Australia/Sydney", "2027-10-02", []string{
			"Sat 2027-10-02 09:00 AEST - 17:00 AEST",
			"Sun 2027-10-03 00:30 AEST - 03:30 AEDT",
			"Sun 2027-10-03 09:00 AEDT - 17:00 AEDT",
		}},
		{"Australia/Sydney", "2027-04-03", []string{
			"Sat 2027-04-03 09:00 AEDT - 17:00 AEDT",
			"Sun 2027-04-04 00:30 AEDT - 03:30 AEST",
			"Sun 2027-04-04 09:00 AEST - 17:00 AEST",
		}},
	}
	for _, c := range cases {
		t.Run(c.zone+"/"+c.saturday, func(t *testing.T) {
			loc := zone(t, c.zone)
			sat := day(t, c.saturday)
			from, to := civil.Resolve(sat, 0, loc), civil.Resolve(sat.AddDays(2), 0, loc)
			require.Equal(t, c.want, spans(loc, h.Intervals(from, to, loc)))
		})
	}
	// A shift inside the skipped hour moves forward by the jump, both ends;
	// one the rule turns around (01:30 is 02:30 BST, 02:15 is 02:15 BST) is
	// no working time.
	london := zone(t, "Europe/London")
	sun := day(t, "2027-03-28")
	from, to := civil.Resolve(sun, 0, london), civil.Resolve(sun, civil.EndOfDay, london)
	var gap availability.Week
	gap[time.Sunday] = []availability.Shift{shift(1, 15, 1, 45)}
	require.Equal(t, []string{"Sun 2027-03-28 02:15 BST - 02:45 BST"}, spans(london, hours(t, gap).Intervals(from, to, london)))
	gap[time.Sunday] = []availability.Shift{shift(1, 30, 2, 15)}
	require.Empty(t, hours(t, gap).Intervals(from, to, london))
}

// A record a merchant writes is bounded: shifts a day, exceptions,
// catalog items. Every availability query walks the shifts, and every
// instance keeps many merchants' records parsed.
func TestStaffHoursAreBounded(t *testing.T) {
	shifts := func(n int) []availability.Shift {
		out := make([]availability.Shift, n)
		for i := range out {
			at := func(m int) civil.Clock { return civil.At(m/60, m%60) }
			out[i] = availability.Shift{Start: at(40 * i), End: at(40*i + 20)}
		}
		return out
	}
	ok := availability.StaffHours{StaffID: "5d2c1b8e-7d6f-4a3b-8c9d-0e1f2a3b4c5d"}
	ok.Week[time.Monday] = shifts(availability.MaxShiftsPerDay)
	require.NoError(t, ok.Check())

	many := ok
	many.Week[time.Monday] = shifts(availability.MaxShiftsPerDay + 1)
	start := civil.Date{Year: 2030, Month: time.January, Day: 1}
	for i := range availability.MaxExceptions + 1 {
		many.Exceptions = append(many.Exceptions, availability.Exception{Date: start.AddDays(i), Reason: availability.Holiday})
	}
	many.Exceptions[0] = availability.Exception{Date: start, Reason: availability.ChangedHours, Shifts: shifts(availability.MaxShiftsPerDay + 1)}
	for range availability.MaxCatalogItems + 1 {
		many.CatalogItemIDs = append(many.CatalogItemIDs, "5d2c1b8e-7d6f-4a3b-8c9d-0e1f2a3b4c5d")
	}
	var invalid *apperr.ValidationError
	require.ErrorAs(t, many.Check(), &invalid)
	var fields []string
	for _, f := range invalid.Fields {
		fields = append(fields, f.Field)
	}
	require.Equal(t, []string{"week.monday", "exceptions", "exceptions[0].shifts", "catalog_item_ids"}, fields)
}

// Covers: a span within one shift, or shifts that touch; not one across a
// break, on a holiday, or past the day's end.
func TestWorkingHoursCoverASpanWithinTheirShiftsOnly(t *testing.T) {
	loc := zone(t, "Europe/London")
	w := officeWeek()
	w[time.Saturday] = []availability.Shift{shift(9, 0, 12, 0), shift(12, 0, 14, 0)}
	h, err := availability.NewWorkingHours(w, []availability.Exception{{Date: day(t, "2027-03-30"), Reason: availability.Holiday}})
	require.NoError(t, err)
	at := func(d string, hh, mm int) time.Time { return civil.Resolve(day(t, d), civil.At(hh, mm), loc) }
	require.True(t, h.Covers(at("2027-03-29", 9, 0), at("2027-03-29", 11, 0), loc))
	require.True(t, h.Covers(at("2027-03-29", 13, 0), at("2027-03-29", 17, 0), loc))
	require.False(t, h.Covers(at("2027-03-29", 11, 0), at("2027-03-29", 13, 30), loc), "across the lunch break")
	require.False(t, h.Covers(at("2027-03-29", 8, 0), at("2027-03-29", 10, 0), loc), "before the shift")
	require.False(t, h.Covers(at("2027-03-30", 9, 0), at("2027-03-30", 11, 0), loc), "a holiday")
	require.True(t, h.Covers(at("2027-04-03", 11, 0), at("2027-04-03", 13, 0), loc), "shifts that touch")
	require.False(t, h.Covers(at("2027-04-04", 9, 0), at("2027-04-04", 11, 0), loc), "a Sunday off")
	e, ok := h.ExceptionOn(day(t, "2027-03-30"))
	require.True(t, ok)
	require.Equal(t, availability.Holiday, e.Reason)
}
