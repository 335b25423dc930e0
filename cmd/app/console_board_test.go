package main

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// The board's jobs say their status in words a sighted person reads, not
// by their colour alone (WCAG 1.4.1): a job in service or done reads so
// on its chip, beside the words a screen reader is given.
func TestConsoleBoardSaysStatusesInWords(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Grace Hopper")
	// A Wednesday: the week's board shows the three in every zone.
	start := time.Date(2030, 5, 8, 12, 0, 0, 0, time.UTC)
	chips := map[string]string{}
	for status, at := range map[string]time.Time{"planned": start.Add(-3 * time.Hour), "in_service": start.Add(-2 * time.Hour), "done": start.Add(-time.Hour)} {
		order := a.createOrder(a.opA, customer, 9000)
		a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order+"/assignment", a.opA, map[string]any{
			"staff_id": a.staffA, "start_at": at.Format(time.RFC3339), "end_at": at.Add(time.Hour).Format(time.RFC3339)})
		sched := a.crmSchedule(a.opA, order).Body["id"].(string)
		for _, next := range map[string][]string{"in_service": {"in_service"}, "done": {"in_service", "done"}}[status] {
			a.must(http.StatusOK, http.MethodPost, "/v1/schedules/"+sched+"/status", a.worker, map[string]any{"status": next})
		}
		require.Eventually(t, func() bool {
			r, err := a.send(http.MethodGet, "/v1/schedules/"+sched, auth(a.opA), nil)
			return err == nil && r.Status == http.StatusOK && r.Body["status"] == status
		}, 5*time.Second, 10*time.Millisecond, "the read model shows schedule %s %s", sched, status)
		chips[order] = status
	}

	c := newConsoleClient(t, a.base)
	c.signIn(a.opA)
	_, _, page := c.do(http.MethodGet, "/console/board?week="+start.Format(time.DateOnly), nil)
	hidden := regexp.MustCompile(`<span class="sr">[^<]*</span>`)
	tags := regexp.MustCompile(`<[^>]+>`)
	for order, status := range chips {
		chip := regexp.MustCompile(`(?s)<a class="chip [a-z_]+" href="/console/orders/` + order + `">(.*?)</a>`).FindStringSubmatch(page)
		require.NotNil(t, chip, "the board shows order %s", order)
		seen := tags.ReplaceAllString(hidden.ReplaceAllString(chip[1], ""), "")
		require.Contains(t, seen, strings.ReplaceAll(status, "_", " "), "a %s job's chip says so in words, not only in its colour: %q", status, seen)
	}
}

// The board's columns are the days of the week on the session's clock. In
// Jerusalem the clocks go forward on Friday 26 March 2027 (02:00 to
// 03:00), so Saturday 00:30 is less than five days of 24 hours after
// Monday's midnight: the job there is still Saturday's, not Friday's.
func TestConsoleBoardPutsAJobOnItsDayAfterTheClocksChange(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	jerusalem, err := time.LoadLocation("Asia/Jerusalem")
	require.NoError(t, err)
	order := a.createOrder(a.opA, a.createCustomer(a.opA, "Grace Hopper"), 9000)
	at := time.Date(2027, time.March, 27, 0, 30, 0, 0, jerusalem)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": at.Format(time.RFC3339), "end_at": at.Add(time.Hour).Format(time.RFC3339)})
	a.crmSchedule(a.opA, order)

	c := newConsoleClient(t, a.base)
	_, _, page := c.do(http.MethodGet, "/console/signin", nil)
	m := signinTokenRe.FindStringSubmatch(page)
	require.NotNil(t, m, "the sign-in form has a token")
	status, _, body := c.do(http.MethodPost, "/console/signin", url.Values{"token": {m[1]}, "key": {a.opA}, "tz": {"Asia/Jerusalem"}})
	require.Equal(t, http.StatusSeeOther, status, body)
	_, _, page = c.do(http.MethodGet, "/console/board?week=2027-03-22", nil)
	cell := regexp.MustCompile(`(?s)href="/console/orders/` + order + `">.*?aria-label="Assign [^"]* on ([^"]+)"`).FindStringSubmatch(page)
	require.NotNil(t, cell, "the board shows order %s", order)
	require.Equal(t, "Sat 27 Mar", cell[1], "the job at 00:30 on Saturday is in Saturday's column")
}
