package console

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/civil"
)

// In Havana the clocks skip from Saturday 24:00 to Sunday 01:00 on 14
// March 2027: the board still has a Sunday column, and a worker's Sunday
// starts at 01:00, not at 23:00 the evening before.
func TestTheConsoleCountsDaysWhereTheClocksSkipMidnight(t *testing.T) {
	havana, err := time.LoadLocation("America/Havana")
	require.NoError(t, err)
	days := weekDays(civil.Date{Year: 2027, Month: time.March, Day: 8}, civil.Date{Year: 2027, Month: time.March, Day: 14}, havana)
	var labels []string
	for _, d := range days {
		labels = append(labels, d.Date+" "+d.Label)
	}
	require.Equal(t, []string{"2027-03-08 Mon 8 Mar", "2027-03-09 Tue 9 Mar", "2027-03-10 Wed 10 Mar", "2027-03-11 Thu 11 Mar",
		"2027-03-12 Fri 12 Mar", "2027-03-13 Sat 13 Mar", "2027-03-14 Sun 14 Mar"}, labels)
	require.True(t, days[6].Today)

	today, tomorrow := dayOf(time.Date(2027, time.March, 14, 15, 0, 0, 0, time.UTC), havana)
	require.Equal(t, "2027-03-14T05:00:00Z", today.UTC().Format(time.RFC3339), "Sunday starts at 01:00 CDT")
	require.Equal(t, "2027-03-15T04:00:00Z", tomorrow.UTC().Format(time.RFC3339), "Monday at 00:00 CDT")
}

// The assignment form offers 09:00 to 11:00 on the day picked, on the
// clock, also on the day the clocks go forward (midnight plus nine hours
// is 10:00 then).
func TestTheDefaultWindowIsNineOnTheClockOnADaylightSavingDay(t *testing.T) {
	london, err := time.LoadLocation("Europe/London")
	require.NoError(t, err)
	start, end, ok := defaultWindow("2027-03-28", london)
	require.True(t, ok)
	require.Equal(t, "2027-03-28T09:00", start)
	require.Equal(t, "2027-03-28T11:00", end)
	_, _, ok = defaultWindow("28 March", london)
	require.False(t, ok)
}
