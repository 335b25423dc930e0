// Package availability holds staff members' working hours (a weekly
// pattern in the merchant's time zone, and dated exceptions: a holiday, a
// sick day, an extra working day) and the one operation that answers the
// bookable slots for a duration (Slots).
//
// Local times become instants through civil.Resolve, the same rule as
// service plans' visits: a shift whose start or end the clocks skip or
// repeat on a daylight-saving day starts or ends where that rule puts it,
// and a shift the rule leaves empty is no working time.
package availability

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/civil"
)

// Shift is a span of working time within one local day: [Start, End),
// End up to 24:00.
type Shift struct {
	Start civil.Clock `json:"start"`
	End   civil.Clock `json:"end"`
}

// Week is the weekly pattern: each weekday's shifts (indexed by
// time.Weekday), in order, none overlapping.
type Week [7][]Shift

// Reason says why a date differs from the weekly pattern.
type Reason string

const (
	Holiday      Reason = "holiday"       // off all day
	SickDay      Reason = "sick_day"      // off all day
	ExtraDay     Reason = "extra_day"     // a working day that is not in the pattern (an extra Saturday)
	ChangedHours Reason = "changed_hours" // other hours than the pattern's
)

// Exception replaces the weekly pattern on one local date: no shifts for a
// holiday or a sick day, the day's own shifts for an extra day or changed
// hours.
type Exception struct {
	Date   civil.Date `json:"date"`
	Reason Reason     `json:"reason"`
	Shifts []Shift    `json:"shifts,omitempty"`
}

// WorkingHours are one staff member's working hours. The zero value works
// never.
type WorkingHours struct {
	week       Week
	exceptions map[civil.Date]Exception
}

// NewWorkingHours checks a weekly pattern and its exceptions. Every error
// names its field: week.monday[0].end, exceptions[2].date, ...
func NewWorkingHours(week Week, exceptions []Exception) (WorkingHours, error) {
	var errs apperr.Fields
	h := WorkingHours{exceptions: make(map[civil.Date]Exception, len(exceptions))}
	for wd, shifts := range week {
		checkShifts(&errs, "week."+strings.ToLower(time.Weekday(wd).String()), shifts)
		h.week[wd] = slices.Clone(shifts)
	}
	for i, e := range exceptions {
		field := fmt.Sprintf("exceptions[%d].", i)
		switch {
		case e.Date.IsZero():
			errs.Add(field+"date", "is required")
		case !e.Date.Valid():
			errs.Add(field+"date", "is not a date")
		default:
			if _, twice := h.exceptions[e.Date]; twice {
				errs.Add(field+"date", "%s has an exception already", e.Date)
			}
		}
		switch e.Reason {
		case Holiday, SickDay:
			if len(e.Shifts) > 0 {
				errs.Add(field+"shifts", "must be empty for a %s: it is no working time", e.Reason)
			}
		case ExtraDay, ChangedHours:
			if len(e.Shifts) == 0 {
				errs.Add(field+"shifts", "are required for %s", e.Reason)
			}
		default:
			errs.Add(field+"reason", "must be holiday, sick_day, extra_day or changed_hours")
		}
		checkShifts(&errs, field+"shifts", e.Shifts)
		e.Shifts = slices.Clone(e.Shifts)
		h.exceptions[e.Date] = e
	}
	if err := errs.Err(); err != nil {
		return WorkingHours{}, err
	}
	return h, nil
}

func checkShifts(errs *apperr.Fields, field string, shifts []Shift) {
	for i, s := range shifts {
		f := fmt.Sprintf("%s[%d].", field, i)
		startOK := s.Start >= 0 && s.Start < civil.EndOfDay
		if !startOK {
			errs.Add(f+"start", "must be a time of day from 00:00 to 23:59")
		}
		if !s.End.Valid() {
			errs.Add(f+"end", "must be a time of day from 00:00 to 24:00: a shift lies within one day")
		} else if startOK && s.End <= s.Start {
			errs.Add(f+"end", "must be after start")
		}
		if i > 0 && startOK && s.Start < shifts[i-1].End {
			errs.Add(f+"start", "must not be before the end of the shift before it (%s)", shifts[i-1].End)
		}
	}
}

// ShiftsOn returns the shifts of local date d: its exception's, or else the
// weekly pattern's.
func (h WorkingHours) ShiftsOn(d civil.Date) []Shift {
	if e, ok := h.exceptions[d]; ok {
		return e.Shifts
	}
	return h.week[d.Weekday()]
}

// ExceptionOn returns local date d's exception, if it has one.
func (h WorkingHours) ExceptionOn(d civil.Date) (Exception, bool) {
	e, ok := h.exceptions[d]
	return e, ok
}

// Covers reports whether [start, end) lies wholly within the working time
// (in loc): within one shift, or shifts that touch.
func (h WorkingHours) Covers(start, end time.Time, loc *time.Location) bool {
	in := h.Intervals(start, end, loc)
	return len(in) == 1 && in[0].Start.Equal(start) && in[0].End.Equal(end)
}

// Interval is a span of time: [Start, End).
type Interval struct {
	Start, End time.Time
}

// Intervals returns the working time in [from, to), in loc: sorted, with
// touching and overlapping shifts merged (a shift to 24:00 and the next
// day's from 00:00 are one span), clipped to [from, to).
func (h WorkingHours) Intervals(from, to time.Time, loc *time.Location) []Interval {
	last := civil.DateOf(to, loc).AddDays(1)
	out := make([]Interval, 0, 2*(last.DaysSince(civil.DateOf(from, loc))+2))
	for d := civil.DateOf(from, loc).AddDays(-1); !d.After(last); d = d.AddDays(1) {
		for _, s := range h.ShiftsOn(d) {
			start, end := civil.Resolve(d, s.Start, loc), civil.Resolve(d, s.End, loc)
			if start.Before(from) {
				start = from
			}
			if end.After(to) {
				end = to
			}
			if start.Before(end) {
				out = append(out, Interval{start, end})
			}
		}
	}
	return merge(out)
}

// merge sorts spans and joins those that touch or overlap.
func merge(spans []Interval) []Interval {
	slices.SortFunc(spans, func(a, b Interval) int { return a.Start.Compare(b.Start) })
	out := spans[:0]
	for _, s := range spans {
		if n := len(out); n > 0 && !s.Start.After(out[n-1].End) {
			if s.End.After(out[n-1].End) {
				out[n-1].End = s.End
			}
			continue
		}
		out = append(out, s)
	}
	return out
}
