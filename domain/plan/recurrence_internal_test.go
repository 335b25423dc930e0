package plan

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/civil"
)

// has and datesFrom, which work a date's place out arithmetically, agree
// with the walk over the rule's dates from its start, on random rules
// (every frequency, intervals, weekdays, month ends, counts and end dates).
func TestRecurrenceArithmeticAgreesWithTheWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	base := civil.Date{Year: 2027, Month: time.January, Day: 1}
	for i := range 1000 {
		r := Recurrence{Frequency: []Frequency{Daily, Weekly, Monthly}[rng.IntN(3)], Interval: 1 + rng.IntN(4),
			Start: base.AddDays(rng.IntN(400))}
		switch r.Frequency {
		case Weekly:
			for w := range 7 {
				if rng.IntN(3) == 0 {
					r.Weekdays = append(r.Weekdays, time.Weekday(w))
				}
			}
		case Monthly:
			if rng.IntN(2) == 0 {
				r.MonthDay = 1 + rng.IntN(31)
			}
		}
		switch rng.IntN(3) {
		case 0:
			r.Count = 1 + rng.IntN(30)
		case 1:
			u := r.Start.AddDays(rng.IntN(600))
			r.Until = &u
		}
		r = r.normalized()
		var walked []civil.Date
		last := r.Start.AddDays(900)
		for d := range r.dates() {
			if d.After(last) {
				break
			}
			walked = append(walked, d)
		}
		for d := r.Start.AddDays(-10); !d.After(last); d = d.AddDays(1) {
			require.Equal(t, slices.Contains(walked, d), r.has(d), "rule %d %+v, date %s", i, r, d)
		}
		from := r.Start.AddDays(rng.IntN(700) - 20)
		got := []civil.Date{}
		for d := range r.datesFrom(from) {
			if d.After(last) {
				break
			}
			got = append(got, d)
		}
		want := slices.DeleteFunc(append([]civil.Date{}, walked...), func(d civil.Date) bool { return d.Before(from) })
		require.Equal(t, want, got, "rule %d %+v, from %s", i, r, from)
	}
}
