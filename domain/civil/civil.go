// Package civil holds local calendar dates and times of day, and the one
// rule that turns them into instants in a time zone (Resolve). Service
// plans and working hours are written in the merchant's local time; every
// local time Hearth turns into an instant goes through Resolve, so a visit
// at 09:00 stays at 09:00 on both sides of a daylight-saving change and
// the times a clock skips or shows twice are resolved the same way
// everywhere.
package civil

import (
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"hearth/domain/apperr"
)

// Date is a day of the calendar, without a time zone.
type Date struct {
	Year  int
	Month time.Month
	Day   int
}

// DateOf returns the local date of t in loc.
func DateOf(t time.Time, loc *time.Location) Date {
	y, m, d := t.In(loc).Date()
	return Date{y, m, d}
}

// NoSuchDayError is a date written YYYY-MM-DD that is no day of the
// calendar (2027-02-29, 2027-04-31): its form is right, so a message about
// the form would send the writer looking for a typo. Why says what the
// calendar has instead.
type NoSuchDayError struct {
	Input string
	Why   string
}

func (e *NoSuchDayError) Error() string { return fmt.Sprintf("parse date %q: %s", e.Input, e.Why) }

// ParseDate reads a date written as 2006-01-02; one of that form that is
// no day of the calendar is a *NoSuchDayError.
func ParseDate(s string) (Date, error) {
	t, err := time.Parse(time.DateOnly, s)
	if err == nil {
		return DateOf(t, time.UTC), nil
	}
	num := func(from, to int) int {
		n := 0
		for i := from; i < to; i++ {
			if s[i] < '0' || s[i] > '9' {
				return -1
			}
			n = n*10 + int(s[i]-'0')
		}
		return n
	}
	if len(s) == len(time.DateOnly) && s[4] == '-' && s[7] == '-' {
		y, m, d := num(0, 4), num(5, 7), num(8, 10)
		switch {
		case y < 0 || m < 0 || d < 0:
		case m < 1 || m > 12:
			return Date{}, &NoSuchDayError{Input: s, Why: "a year has 12 months"}
		default:
			return Date{}, &NoSuchDayError{Input: s, Why: fmt.Sprintf("%s %d has %d days", time.Month(m), y, DaysIn(y, time.Month(m)))}
		}
	}
	return Date{}, fmt.Errorf("parse date %q: want YYYY-MM-DD", s)
}

// IsZero reports whether d is the zero Date (no date given).
func (d Date) IsZero() bool { return d == Date{} }

// Valid reports whether d is a real day of the calendar.
func (d Date) Valid() bool {
	return d.Year >= 1 && d.Year <= 9999 && d.noon().Day() == d.Day && d.noon().Month() == d.Month
}

func (d Date) noon() time.Time { return time.Date(d.Year, d.Month, d.Day, 12, 0, 0, 0, time.UTC) }

// AddDays returns the date n days after d (before it when n < 0).
func (d Date) AddDays(n int) Date { return DateOf(d.noon().AddDate(0, 0, n), time.UTC) }

// Weekday returns the day of the week of d.
func (d Date) Weekday() time.Weekday { return d.noon().Weekday() }

// DaysSince returns the number of days from e to d (negative when d is
// before e).
func (d Date) DaysSince(e Date) int { return int(d.noon().Sub(e.noon()).Hours() / 24) }

// Compare returns -1, 0 or +1 as d is before, equal to or after e.
func (d Date) Compare(e Date) int { return d.noon().Compare(e.noon()) }

// Before reports whether d is before e.
func (d Date) Before(e Date) bool { return d.Compare(e) < 0 }

// After reports whether d is after e.
func (d Date) After(e Date) bool { return d.Compare(e) > 0 }

// String writes d as 2006-01-02.
func (d Date) String() string { return fmt.Sprintf("%04d-%02d-%02d", d.Year, int(d.Month), d.Day) }

// MarshalText writes d as 2006-01-02 (the form it is stored in).
func (d Date) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads d written as 2006-01-02.
func (d *Date) UnmarshalText(b []byte) error {
	v, err := ParseDate(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// DaysIn returns the number of days in month m of year y.
func DaysIn(y int, m time.Month) int { return time.Date(y, m+1, 0, 12, 0, 0, 0, time.UTC).Day() }

// Clock is a local time of day, in minutes after midnight: 0 is 00:00 and
// 1440 is 24:00, the end of the day (allowed as the end of a window or a
// shift, never as a start).
type Clock int

// EndOfDay is 24:00.
const EndOfDay Clock = 24 * 60

// At returns the time of day h:m.
func At(h, m int) Clock { return Clock(h*60 + m) }

// ParseClock reads a time of day written as 15:04 (24:00 included).
func ParseClock(s string) (Clock, error) {
	digit := func(i int) int {
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return -100
		}
		return int(s[i] - '0')
	}
	h, m := digit(0)*10+digit(1), digit(3)*10+digit(4)
	if len(s) != 5 || s[2] != ':' || h < 0 || m < 0 || m > 59 || h > 24 || (h == 24 && m != 0) {
		return 0, fmt.Errorf("parse time of day %q: want HH:MM between 00:00 and 24:00", s)
	}
	return At(h, m), nil
}

// Valid reports whether c is a time of day (00:00 to 24:00).
func (c Clock) Valid() bool { return c >= 0 && c <= EndOfDay }

// Duration returns c as the time since midnight on a day without a
// daylight-saving change.
func (c Clock) Duration() time.Duration { return time.Duration(c) * time.Minute }

// String writes c as 15:04.
func (c Clock) String() string {
	if !c.Valid() {
		return fmt.Sprintf("Clock(%d)", int(c))
	}
	return fmt.Sprintf("%02d:%02d", int(c)/60, int(c)%60)
}

// MarshalText writes c as 15:04 (the form it is stored in).
func (c Clock) MarshalText() ([]byte, error) {
	if !c.Valid() {
		return nil, fmt.Errorf("marshal time of day: %d minutes is not between 00:00 and 24:00", int(c))
	}
	return []byte(c.String()), nil
}

// UnmarshalText reads c written as 15:04.
func (c *Clock) UnmarshalText(b []byte) error {
	v, err := ParseClock(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// LoadZone loads an IANA time zone by name ("Europe/London"). An empty,
// unknown or machine-dependent name ("Local") is a validation error naming
// field: time.LoadLocation would read "" as UTC and "Local" as whatever the
// server runs in. A zone is read and parsed once, then kept: every
// availability query loads the merchant's.
func LoadZone(field, name string) (*time.Location, error) {
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	if name == "" {
		return nil, apperr.Invalid(field, "is required")
	}
	// path.Clean: one spelling per zone ("./UTC" and "Europe//London"
	// load too, and there is no end to such names).
	// "localtime" and "posixrules" are links the machine's configuration
	// sets, like "Local"; posix/ is a second copy of every zone and right/
	// one that counts leap seconds, its clock some 27 seconds off UTC's.
	// time.LoadLocation reads them all from the system's zone directory.
	if name == "Local" || name == "localtime" || name == "posixrules" ||
		strings.HasPrefix(name, "posix/") || strings.HasPrefix(name, "right/") ||
		strings.HasPrefix(name, "/") || strings.Contains(name, "..") || path.Clean(name) != name {
		return nil, apperr.Invalid(field, "must be an IANA time zone name, such as Europe/London")
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, apperr.Invalid(field, "unknown time zone %q", name)
	}
	// Only names the time zone database knows are kept, so the map stays
	// as small as the database whatever names callers try.
	zones.Store(name, loc)
	return loc, nil
}

// StoredZone loads the zone of a name stored before LoadZone refused the
// names that are no IANA zone of their own (a plan keeps the zone it was
// created in, as its first event says). It reads such a name as migration
// eventstore/026 rewrote merchants' (docs/operations.md, upgrading
// merchants' time zones): another spelling is its clean form, a posix/ or
// right/ copy the zone itself, and the machine's zone ("Local",
// "localtime", "posixrules", "", a path) UTC. time.LoadLocation would read
// those in the zone of whichever process reads them, so an API instance
// and a worker could put the same visit at different instants.
func StoredZone(name string) (*time.Location, error) {
	zone := name
	if zone != "" && !strings.HasPrefix(zone, "/") {
		zone = path.Clean(zone)
	}
	if z, ok := strings.CutPrefix(zone, "posix/"); ok {
		zone = z
	} else if z, ok := strings.CutPrefix(zone, "right/"); ok {
		zone = z
	}
	switch {
	case zone == "" || zone == "." || zone == "Local" || zone == "localtime" || zone == "posixrules",
		strings.HasPrefix(zone, "/"), strings.Contains(zone, ".."),
		strings.HasPrefix(zone, "posix/"), strings.HasPrefix(zone, "right/"):
		return time.UTC, nil
	}
	return LoadZone("time_zone", zone)
}

// OnClock returns how long [from, to) lasts on the clocks of loc: its
// length less the hour the clocks go back in it, or plus the hour they
// skip (October in London, midnight to midnight, lasts 31 days on the
// clock and 31 days and an hour). Ranges a client names in local days
// ("a month", "a year") are bounded on the clock.
func OnClock(from, to time.Time, loc *time.Location) time.Duration {
	_, before := from.In(loc).Zone()
	_, after := to.In(loc).Zone()
	return to.Sub(from) + time.Duration(after-before)*time.Second
}

// zones holds the zones LoadZone loaded, by name. A *time.Location is
// immutable, so one is shared by every caller.
var zones sync.Map

// Resolve returns the instant at which clocks in loc show time c on date d
// (c = 24:00 is midnight at the end of d). Where that is not one instant,
// the rule is:
//
//   - a local time that does not exist (the clock jumps over it, when
//     daylight-saving time starts) moves forward by the length of the
//     jump: 01:30 on a day London skips 01:00 to 02:00 is 02:30 BST;
//   - a local time that exists twice (the clock goes back over it) is the
//     earlier of the two instants: 01:30 on a day London goes back from
//     02:00 BST to 01:00 GMT is 01:30 BST.
//
// time.Date does not promise which instant it picks in either case, so
// Resolve looks at the zone's offsets itself.
func Resolve(d Date, c Clock, loc *time.Location) time.Time {
	// The wall time written as if it were UTC; the instant is wall minus
	// the offset in force then.
	wall := time.Date(d.Year, d.Month, d.Day, 0, int(c), 0, 0, time.UTC)
	// Offsets lie between -12 and +14 hours, so every instant whose wall
	// clock reads wall lies within 15 hours of it: collect the zone
	// periods (offset and start) in force over that span.
	type period struct {
		start  time.Time
		offset time.Duration
	}
	var periods []period
	lo, hi := wall.Add(-15*time.Hour), wall.Add(15*time.Hour)
	for t := lo; ; {
		_, off := t.In(loc).Zone()
		periods = append(periods, period{t, time.Duration(off) * time.Second})
		_, end := t.In(loc).ZoneBounds()
		if end.IsZero() || !end.Before(hi) || !end.After(t) {
			break
		}
		t = end
	}
	var best time.Time
	for _, p := range periods {
		at := wall.Add(-p.offset)
		if _, off := at.In(loc).Zone(); time.Duration(off)*time.Second == p.offset && (best.IsZero() || at.Before(best)) {
			best = at
		}
	}
	if !best.IsZero() {
		return best.In(loc)
	}
	// The clock jumped over wall at the start of some period: read wall with
	// the offset before the jump, which lands as far past the jump as wall
	// is past the last time shown before it.
	for i := 1; i < len(periods); i++ {
		before, after, jump := periods[i-1].offset, periods[i].offset, periods[i].start
		if after > before && !wall.Before(jump.Add(before)) && wall.Before(jump.Add(after)) {
			return wall.Add(-before).In(loc)
		}
	}
	return time.Date(d.Year, d.Month, d.Day, 0, int(c), 0, 0, loc)
}
