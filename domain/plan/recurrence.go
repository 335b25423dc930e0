package plan

import (
	"iter"
	"slices"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/civil"
)

// Frequency is the unit a recurrence repeats in.
type Frequency string

const (
	Daily   Frequency = "daily"
	Weekly  Frequency = "weekly"
	Monthly Frequency = "monthly"
)

// Limits of a recurrence.
const (
	MaxInterval = 365
	MaxCount    = 1000
)

// Recurrence is when a plan's visits fall, as local dates:
//
//   - daily: Start, then every Interval days;
//   - weekly: in the week (Monday to Sunday) of Start and every Interval-th
//     week after it, on each of Weekdays (Start's weekday when empty), never
//     before Start;
//   - monthly: in Start's month and every Interval-th month after it, on
//     MonthDay (Start's day when 0), or on the month's last day when the
//     month is shorter (31 is the last day of every month).
//
// It ends after Until (inclusive) or after Count dates, or never when
// neither is given. Count counts the dates the rule gives from Start,
// skipped visits included, so a skip never makes a plan longer.
type Recurrence struct {
	Frequency Frequency      `json:"frequency"`
	Interval  int            `json:"interval"`
	Weekdays  []time.Weekday `json:"weekdays,omitempty"`
	MonthDay  int            `json:"month_day,omitempty"`
	Start     civil.Date     `json:"start"`
	Until     *civil.Date    `json:"until,omitempty"`
	Count     int            `json:"count,omitempty"`
}

// check adds the recurrence's field errors, named recurrence.<field>.
func (r Recurrence) check(errs *apperr.Fields) {
	const p = "recurrence."
	before := len(*errs)
	known := r.Frequency == Daily || r.Frequency == Weekly || r.Frequency == Monthly
	switch {
	case known:
	case r.Frequency == "":
		errs.Add(p+"frequency", "is required")
	default:
		errs.Add(p+"frequency", "must be daily, weekly or monthly")
	}
	if r.Interval < 1 || r.Interval > MaxInterval {
		errs.Add(p+"interval", "must be between 1 and %d", MaxInterval)
	}
	if len(r.Weekdays) > 0 && known && r.Frequency != Weekly {
		errs.Add(p+"weekdays", "are for a weekly recurrence only")
	}
	for _, w := range r.Weekdays {
		if w < time.Sunday || w > time.Saturday {
			errs.Add(p+"weekdays", "must be days of the week, 0 (Sunday) to 6 (Saturday)")
			break
		}
	}
	if r.MonthDay != 0 && known && r.Frequency != Monthly {
		errs.Add(p+"month_day", "is for a monthly recurrence only")
	} else if r.MonthDay < 0 || r.MonthDay > 31 {
		errs.Add(p+"month_day", "must be between 1 and 31")
	}
	startOK := r.Start.Valid()
	if r.Start.IsZero() {
		errs.Add(p+"start", "is required")
	} else if !startOK {
		errs.Add(p+"start", "is not a date")
	}
	if r.Count < 0 || r.Count > MaxCount {
		errs.Add(p+"count", "must be between 1 and %d", MaxCount)
	}
	if r.Until != nil && r.Count != 0 {
		errs.Add(p+"count", "give an end date or a number of visits, not both")
	}
	if r.Until == nil || !startOK {
		return
	}
	if !r.Until.Valid() {
		errs.Add(p+"until", "is not a date")
	} else if r.Until.Before(r.Start) {
		errs.Add(p+"until", "must not be before recurrence.start")
	} else if len(*errs) == before {
		if _, ok := r.normalized().first(); !ok {
			errs.Add(p+"until", "ends the recurrence before its first visit")
		}
	}
}

// normalized returns r with its defaults filled in (weekdays, month day)
// and its weekdays sorted Monday first, without repeats, so that equal
// rules compare equal.
func (r Recurrence) normalized() Recurrence {
	r.Weekdays = slices.Clone(r.Weekdays)
	switch r.Frequency {
	case Weekly:
		days := r.Weekdays
		if len(days) == 0 {
			days = []time.Weekday{r.Start.Weekday()}
		}
		slices.SortFunc(days, func(a, b time.Weekday) int { return mondayFirst(a) - mondayFirst(b) })
		r.Weekdays = slices.Compact(days)
	case Monthly:
		if r.MonthDay == 0 {
			r.MonthDay = r.Start.Day
		}
	}
	if r.Until != nil {
		u := *r.Until
		r.Until = &u
	}
	return r
}

func mondayFirst(w time.Weekday) int { return (int(w) + 6) % 7 }

func (r Recurrence) equal(s Recurrence) bool {
	sameUntil := (r.Until == nil) == (s.Until == nil) && (r.Until == nil || *r.Until == *s.Until)
	return r.Frequency == s.Frequency && r.Interval == s.Interval && slices.Equal(r.Weekdays, s.Weekdays) &&
		r.MonthDay == s.MonthDay && r.Start == s.Start && r.Count == s.Count && sameUntil
}

// first returns the rule's first date, if it has one.
func (r Recurrence) first() (civil.Date, bool) {
	for d := range r.dates() {
		return d, true
	}
	return civil.Date{}, false
}

// dates yields the rule's dates in order (r normalized). An open-ended rule
// never stops: the caller breaks.
func (r Recurrence) dates() iter.Seq[civil.Date] {
	return func(yield func(civil.Date) bool) {
		n := 0
		emit := func(d civil.Date) bool {
			if r.Until != nil && d.After(*r.Until) {
				return false
			}
			n++
			return yield(d) && (r.Count == 0 || n < r.Count)
		}
		switch r.Frequency {
		case Daily:
			for k := 0; ; k += r.Interval {
				if !emit(r.Start.AddDays(k)) {
					return
				}
			}
		case Weekly:
			monday := r.Start.AddDays(-mondayFirst(r.Start.Weekday()))
			for k := 0; ; k += r.Interval {
				for _, w := range r.Weekdays {
					d := monday.AddDays(7*k + mondayFirst(w))
					if d.Before(r.Start) {
						continue
					}
					if !emit(d) {
						return
					}
				}
			}
		case Monthly:
			for k := 0; ; k += r.Interval {
				first := time.Date(r.Start.Year, r.Start.Month+time.Month(k), 1, 12, 0, 0, 0, time.UTC)
				y, m := first.Year(), first.Month()
				d := civil.Date{Year: y, Month: m, Day: min(r.MonthDay, civil.DaysIn(y, m))}
				if d.Before(r.Start) {
					continue
				}
				if !emit(d) {
					return
				}
			}
		}
	}
}
