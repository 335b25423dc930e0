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

// step, when set, is called for each date the recurrence works out (tests
// count the work of a question put to a plan with it).
var step func()

// dates yields the rule's dates in order (r normalized). An open-ended rule
// never stops: the caller breaks.
func (r Recurrence) dates() iter.Seq[civil.Date] { return r.datesFrom(r.Start) }

// datesFrom yields the rule's dates from from on, in order (r normalized),
// without walking those before: it starts at from's day, week or month,
// its place among the dates (for Count) worked out arithmetically.
func (r Recurrence) datesFrom(from civil.Date) iter.Seq[civil.Date] {
	if from.Before(r.Start) {
		from = r.Start
	}
	return func(yield func(civil.Date) bool) {
		n := 0 // the dates before the current one (Count counts them all)
		emit := func(d civil.Date) bool {
			if step != nil {
				step()
			}
			if r.Until != nil && d.After(*r.Until) {
				return false
			}
			if r.Count != 0 && n >= r.Count {
				return false
			}
			n++
			return d.Before(from) || yield(d)
		}
		switch r.Frequency {
		case Daily:
			k := from.DaysSince(r.Start) / r.Interval * r.Interval
			n = k / r.Interval
			for ; ; k += r.Interval {
				if !emit(r.Start.AddDays(k)) {
					return
				}
			}
		case Weekly:
			monday := r.Start.AddDays(-mondayFirst(r.Start.Weekday()))
			k := from.DaysSince(monday) / 7 / r.Interval * r.Interval
			if k > 0 {
				n = k/r.Interval*len(r.Weekdays) - r.skippedInFirstWeek()
			}
			for ; ; k += r.Interval {
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
			k := ((from.Year-r.Start.Year)*12 + int(from.Month) - int(r.Start.Month)) / r.Interval * r.Interval
			if k > 0 {
				n = k / r.Interval
				if r.skipsFirstMonth() {
					n--
				}
			}
			for ; ; k += r.Interval {
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

// skippedInFirstWeek counts the weekdays of Start's week before Start (a
// weekly rule gives no date there).
func (r Recurrence) skippedInFirstWeek() int {
	n := 0
	for _, w := range r.Weekdays {
		if mondayFirst(w) < mondayFirst(r.Start.Weekday()) {
			n++
		}
	}
	return n
}

// skipsFirstMonth reports whether a monthly rule's date in Start's month is
// before Start (so it gives none there).
func (r Recurrence) skipsFirstMonth() bool {
	return min(r.MonthDay, civil.DaysIn(r.Start.Year, r.Start.Month)) < r.Start.Day
}

// has reports whether d is one of the rule's dates (r normalized), by
// arithmetic from Start: no walk over the dates before it.
func (r Recurrence) has(d civil.Date) bool {
	if step != nil {
		step()
	}
	if d.Before(r.Start) || (r.Until != nil && d.After(*r.Until)) {
		return false
	}
	var n int // d's place among the dates
	switch r.Frequency {
	case Daily:
		k := d.DaysSince(r.Start)
		if k%r.Interval != 0 {
			return false
		}
		n = k / r.Interval
	case Weekly:
		monday := r.Start.AddDays(-mondayFirst(r.Start.Weekday()))
		k := d.DaysSince(monday) / 7
		i := slices.Index(r.Weekdays, d.Weekday())
		if k%r.Interval != 0 || i < 0 {
			return false
		}
		n = k/r.Interval*len(r.Weekdays) + i - r.skippedInFirstWeek()
	case Monthly:
		k := (d.Year-r.Start.Year)*12 + int(d.Month) - int(r.Start.Month)
		if k%r.Interval != 0 || d.Day != min(r.MonthDay, civil.DaysIn(d.Year, d.Month)) {
			return false
		}
		n = k / r.Interval
		if r.skipsFirstMonth() {
			n--
		}
	default:
		return false
	}
	return r.Count == 0 || n < r.Count
}
