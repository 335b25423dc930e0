package console

import (
	"html"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A free slot's button assigns the order at the instant the slot is, also
// where the clocks go back and show an hour twice: London's 01:30 GMT on
// 25 October 2026 is a slot of its own, an hour after 01:30 BST. A
// datetime-local value ("2026-10-25T01:30") names both, and reads back as
// the earlier (civil.Resolve), so the form would assign the order an hour
// before the slot picked, over time the slot did not offer.
func TestAFreeSlotIsAssignedAtTheInstantItShows(t *testing.T) {
	loc, err := time.LoadLocation("Europe/London")
	require.NoError(t, err)
	tmpl, err := (&Console{}).templates()
	require.NoError(t, err)
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return v
	}
	items := []slotView{
		{StaffID: "a", Start: at("2026-10-25T00:30:00Z"), End: at("2026-10-25T01:30:00Z")}, // 01:30 BST to 01:30 GMT
		{StaffID: "a", Start: at("2026-10-25T01:30:00Z"), End: at("2026-10-25T02:30:00Z")}, // 01:30 GMT to 02:30 GMT
		{StaffID: "a", Start: at("2026-03-29T00:30:00Z"), End: at("2026-03-29T01:30:00Z")}, // 00:30 GMT to 02:30 BST
		{StaffID: "a", Start: at("2026-06-01T08:00:00Z"), End: at("2026-06-01T09:00:00Z")},
	}
	p := &page{loc: loc, S: &sessionView{CSRF: "token"},
		Data: &boardData{Slots: &slotsView{Loaded: true, Week: "2026-10-19", OrderID: "o", Version: "1", Items: items}}}
	body, err := execute(tmpl, "board-slots", p)
	require.NoError(t, err)
	forms := regexp.MustCompile(`(?s)<form method="post" action="/console/board/assign">.*?</form>`).FindAllString(string(body), -1)
	require.Len(t, forms, len(items))
	input := regexp.MustCompile(`<input type="hidden" name="([a-z_]+)" value="([^"]*)">`)
	for i, f := range forms {
		values := url.Values{}
		for _, m := range input.FindAllStringSubmatch(f, -1) {
			values.Set(m[1], html.UnescapeString(m[2]))
		}
		r := httptest.NewRequest("POST", "/console/board/assign", strings.NewReader(values.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		require.NoError(t, r.ParseForm())
		fr := &formReader{r: r, loc: loc}
		start, end := fr.when("start_at"), fr.when("end_at")
		require.NoError(t, fr.Err())
		require.NotNil(t, start)
		require.NotNil(t, end)
		require.Equal(t, items[i].Start.UTC().Format(time.RFC3339), start.UTC().Format(time.RFC3339), "slot %d's start (%v)", i, values)
		require.Equal(t, items[i].End.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), "slot %d's end (%v)", i, values)
	}
}
