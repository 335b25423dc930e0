package civil_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/apperr"
	"hearth/domain/civil"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := civil.LoadZone("time_zone", name)
	require.NoError(t, err)
	return loc
}

func date(t *testing.T, s string) civil.Date {
	t.Helper()
	d, err := civil.ParseDate(s)
	require.NoError(t, err)
	return d
}

// A visit at 09:00 stays at 09:00 local on both sides of both changes, in
// a northern and a southern zone: its instant moves by the change instead.
func TestNineStaysNine(t *testing.T) {
	cases := []struct {
		zone           string
		before, after  string // days either side of a change
		offBef, offAft int    // hours east of UTC
	}{
		{"Europe/London", "2026-03-28", "2026-03-29", 0, 1},
		{"Europe/London", "2026-10-24", "2026-10-25", 1, 0},
		{"Australia/Sydney", "2026-04-04", "2026-04-05", 11, 10},
		{"Australia/Sydney", "2026-10-03", "2026-10-04", 10, 11},
	}
	for _, c := range cases {
		t.Run(c.zone+"/"+c.after, func(t *testing.T) {
			loc := zone(t, c.zone)
			for _, d := range []struct {
				day string
				off int
			}{{c.before, c.offBef}, {c.after, c.offAft}} {
				at := civil.Resolve(date(t, d.day), civil.At(9, 0), loc)
				require.Equal(t, "09:00", at.In(loc).Format("15:04"))
				require.Equal(t, d.day, at.In(loc).Format(time.DateOnly))
				_, off := at.Zone()
				require.Equal(t, d.off*3600, off)
			}
		})
	}
}

// The rule for the times a clock skips (forward by the jump) and shows
// twice (the earlier instant), at both changes in three zones: London,
// Sydney (southern hemisphere) and Lord Howe (a 30-minute change).
func TestResolveGapsAndRepeats(t *testing.T) {
	cases := []struct {
		name, zone, day string
		clock           civil.Clock
		want            string // the instant, in UTC
	}{
		// London skips 01:00-02:00 GMT on 2026-03-29: 01:30 is 02:30 BST.
		{"london gap", "Europe/London", "2026-03-29", civil.At(1, 30), "2026-03-29T01:30:00Z"},
		{"london gap start", "Europe/London", "2026-03-29", civil.At(1, 0), "2026-03-29T01:00:00Z"},
		{"london after gap", "Europe/London", "2026-03-29", civil.At(2, 0), "2026-03-29T01:00:00Z"},
		{"london before gap", "Europe/London", "2026-03-29", civil.At(0, 59), "2026-03-29T00:59:00Z"},
		// London shows 01:00-02:00 twice on 2026-10-25: 01:30 BST first.
		{"london repeat", "Europe/London", "2026-10-25", civil.At(1, 30), "2026-10-25T00:30:00Z"},
		{"london repeat start", "Europe/London", "2026-10-25", civil.At(1, 0), "2026-10-25T00:00:00Z"},
		{"london after repeat", "Europe/London", "2026-10-25", civil.At(2, 0), "2026-10-25T02:00:00Z"},
		// Sydney skips 02:00-03:00 AEST on 2026-10-04: 02:30 is 03:30 AEDT.
		{"sydney gap", "Australia/Sydney", "2026-10-04", civil.At(2, 30), "2026-10-03T16:30:00Z"},
		// Sydney shows 02:00-03:00 twice on 2026-04-05: 02:30 AEDT first.
		{"sydney repeat", "Australia/Sydney", "2026-04-05", civil.At(2, 30), "2026-04-04T15:30:00Z"},
		{"sydney after repeat", "Australia/Sydney", "2026-04-05", civil.At(3, 0), "2026-04-04T17:00:00Z"},
		// Lord Howe skips 02:00-02:30 on 2026-10-04 (+10:30 to +11).
		{"lord howe gap", "Australia/Lord_Howe", "2026-10-04", civil.At(2, 10), "2026-10-03T15:40:00Z"},
		// ... and shows 01:30-02:00 twice on 2026-04-05 (+11 to +10:30).
		{"lord howe repeat", "Australia/Lord_Howe", "2026-04-05", civil.At(1, 45), "2026-04-04T14:45:00Z"},
		// 24:00 is the next midnight.
		{"end of day", "Europe/London", "2026-10-24", civil.EndOfDay, "2026-10-24T23:00:00Z"},
		{"utc", "UTC", "2026-10-25", civil.At(1, 30), "2026-10-25T01:30:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := civil.Resolve(date(t, c.day), c.clock, zone(t, c.zone))
			require.Equal(t, c.want, got.UTC().Format(time.RFC3339))
		})
	}
}

// Every local minute of a year in several zones resolves to an instant
// whose clock shows that minute, unless the clock skipped it; a skipped one
// lands exactly one jump later; a repeated one is the earlier instant.
func TestResolveEveryMinute(t *testing.T) {
	if testing.Short() {
		t.Skip("a year of minutes per zone")
	}
	for _, name := range []string{"Europe/London", "Australia/Sydney", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu"} {
		loc := zone(t, name)
		for d := date(t, "2026-01-01"); d.Year == 2026; d = d.AddDays(1) {
			for c := civil.Clock(0); c < civil.EndOfDay; c += 15 {
				got := civil.Resolve(d, c, loc).In(loc)
				wall := time.Date(d.Year, d.Month, d.Day, 0, int(c), 0, 0, time.UTC)
				shown := time.Date(got.Year(), got.Month(), got.Day(), got.Hour(), got.Minute(), 0, 0, time.UTC)
				if shown.Equal(wall) {
					// Not repeated, or the earlier one: an hour before, the
					// clock does not show the same time.
					earlier := got.Add(-time.Hour).In(loc)
					e := time.Date(earlier.Year(), earlier.Month(), earlier.Day(), earlier.Hour(), earlier.Minute(), 0, 0, time.UTC)
					require.False(t, e.Equal(wall), "%s %s %s: not the earlier instant", name, d, c)
					continue
				}
				// Skipped: moved forward, by exactly the jump.
				require.True(t, shown.After(wall), "%s %s %s: moved back", name, d, c)
				_, offAt := got.Zone()
				_, offBefore := got.Add(-shown.Sub(wall)).Zone()
				require.Equal(t, time.Duration(offAt-offBefore)*time.Second, shown.Sub(wall), "%s %s %s: moved by the jump", name, d, c)
			}
		}
	}
}

func TestLoadZone(t *testing.T) {
	for _, bad := range []string{"", "Local", "Mars/Olympus", "../etc/passwd", "/etc/localtime"} {
		_, err := civil.LoadZone("time_zone", bad)
		var v *apperr.ValidationError
		require.ErrorAs(t, err, &v, bad)
		require.Equal(t, "time_zone", v.Fields[0].Field)
	}
}

func TestDateAndClock(t *testing.T) {
	d := date(t, "2028-02-28")
	require.Equal(t, "2028-02-29", d.AddDays(1).String())
	require.Equal(t, "2028-03-01", d.AddDays(2).String())
	require.Equal(t, 2, d.AddDays(2).DaysSince(d))
	require.False(t, civil.Date{Year: 2027, Month: 2, Day: 29}.Valid())
	require.True(t, civil.Date{Year: 2028, Month: 2, Day: 29}.Valid())
	_, err := civil.ParseDate("2026-13-01")
	require.Error(t, err)

	for _, bad := range []string{"24:01", "25:00", "9:00", "-1:00", "12:60", "ab:cd", ""} {
		_, err := civil.ParseClock(bad)
		require.Error(t, err, bad)
	}
	c, err := civil.ParseClock("24:00")
	require.NoError(t, err)
	require.Equal(t, civil.EndOfDay, c)

	b, err := json.Marshal(struct {
		D civil.Date  `json:"d"`
		C civil.Clock `json:"c"`
	}{d, civil.At(9, 5)})
	require.NoError(t, err)
	require.JSONEq(t, `{"d":"2028-02-28","c":"09:05"}`, string(b))
	var back struct {
		D civil.Date  `json:"d"`
		C civil.Clock `json:"c"`
	}
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, d, back.D)
	require.Equal(t, civil.At(9, 5), back.C)
}

// A zone has one name: the spellings the file system also resolves to a
// zone's file ("./UTC", "Europe//London") are refused. There is no end to
// them ("././UTC", ...), and LoadZone keeps every name it accepts, so
// accepting them would let one client grow every instance's memory
// without bound, one request at a time.
func TestLoadZoneRefusesOtherSpellingsOfAZone(t *testing.T) {
	for _, bad := range []string{"./UTC", "././UTC", "./Europe/London", "Europe//London", "Europe/./London", "Europe/London/."} {
		_, err := civil.LoadZone("time_zone", bad)
		var v *apperr.ValidationError
		require.ErrorAs(t, err, &v, bad)
		require.Equal(t, "time_zone", v.Fields[0].Field)
	}
	for _, good := range []string{"UTC", "Europe/London", "America/Argentina/Buenos_Aires"} {
		_, err := civil.LoadZone("time_zone", good)
		require.NoError(t, err, good)
	}
}

// Names the time zone directory holds beside the zones are refused, though
// time.LoadLocation reads them from the system's directory: "localtime"
// and "posixrules" are links the machine's own configuration sets (the
// server's zone, whatever it is, as "Local" would be), and the posix/ and
// right/ trees are a second copy of every zone and one that counts leap
// seconds (its clock some 27 seconds off the one Hearth keeps).
func TestLoadZoneRefusesMachineDependentNames(t *testing.T) {
	for _, bad := range []string{"localtime", "posixrules", "posix/Europe/London", "right/Europe/London", "posix/UTC", "right/UTC"} {
		_, err := civil.LoadZone("time_zone", bad)
		var v *apperr.ValidationError
		require.ErrorAs(t, err, &v, bad)
		require.Equal(t, "time_zone", v.Fields[0].Field)
		require.Contains(t, v.Fields[0].Message, "IANA time zone name", bad)
	}
}
