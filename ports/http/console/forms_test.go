package console

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A date and time typed into a console form (a service request's
// appointment, an assignment's window) is read in the merchant's zone by
// the rule every local time follows (civil.Resolve): a time the clocks
// skip moves forward by the jump, one they show twice is the earlier
// instant, in every zone. time.ParseInLocation promises neither, and picks
// differently from zone to zone.
func TestFormTimesFollowTheDaylightSavingRule(t *testing.T) {
	cases := []struct{ zone, typed, want string }{
		{"Europe/London", "2027-06-01T09:00", "2027-06-01T08:00:00Z"},
		// Skipped: forward by the jump.
		{"Europe/London", "2027-03-28T01:30", "2027-03-28T01:30:00Z"},       // 02:30 BST
		{"America/New_York", "2027-03-14T02:30", "2027-03-14T07:30:00Z"},    // 03:30 EDT, not 01:30 EST
		{"America/New_York", "2027-03-14T02:30:15", "2027-03-14T07:30:15Z"}, // with seconds
		{"America/Santiago", "2027-09-05T00:30", "2027-09-05T04:30:00Z"},    // 01:30 -03, not the day before
		// Shown twice: the earlier.
		{"Europe/London", "2027-10-31T01:30", "2027-10-31T00:30:00Z"},    // 01:30 BST, not GMT
		{"America/New_York", "2027-11-07T01:30", "2027-11-07T05:30:00Z"}, // 01:30 EDT
		{"Australia/Sydney", "2027-04-04T02:30", "2027-04-03T15:30:00Z"}, // 02:30 AEDT, not AEST
	}
	for _, c := range cases {
		t.Run(c.zone+"/"+c.typed, func(t *testing.T) {
			loc, err := time.LoadLocation(c.zone)
			require.NoError(t, err)
			r := httptest.NewRequest("POST", "/", strings.NewReader(url.Values{"at": {c.typed}}.Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			require.NoError(t, r.ParseForm())
			f := &formReader{r: r, loc: loc}
			got := f.when("at")
			require.NoError(t, f.Err())
			require.NotNil(t, got)
			require.Equal(t, c.want, got.UTC().Format(time.RFC3339))
		})
	}
}

// The requests' date filter is [from 00:00, the day after to 00:00) in the
// merchant's zone, each midnight by civil.Resolve: where the clocks skip
// midnight (Havana goes from 00:00 CST to 01:00 CDT on 14 March 2027), the
// day starts at the jump, not at 23:00 the day before, so filtering on
// Saturday 13 March keeps its last hour and filtering on Sunday 14 March
// leaves it out.
func TestDayRangeStartsEachDayWhereItsClockStarts(t *testing.T) {
	loc, err := time.LoadLocation("America/Havana")
	require.NoError(t, err)
	rng := func(q string) (string, string) {
		t.Helper()
		from, to := dayRange(httptest.NewRequest("GET", "/console/requests?"+q, nil), loc)
		require.NotNil(t, from)
		require.NotNil(t, to)
		return from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339)
	}
	from, to := rng("from=2027-03-13&to=2027-03-13")
	require.Equal(t, "2027-03-13T05:00:00Z", from, "00:00 CST")
	require.Equal(t, "2027-03-14T05:00:00Z", to, "Sunday starts at 01:00 CDT: Saturday 23:00 CST is Saturday's")
	from, to = rng("from=2027-03-14&to=2027-03-14")
	require.Equal(t, "2027-03-14T05:00:00Z", from, "Sunday starts at 01:00 CDT, not Saturday 23:00 CST")
	require.Equal(t, "2027-03-15T04:00:00Z", to, "00:00 CDT")
}
