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
