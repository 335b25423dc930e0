package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// A dispatcher sets a staff member's working hours on their page (a
// refused pattern saves nothing), a holiday and an extra day; then, on the
// board, the order picked to assign lists the free slots those hours
// leave, and picking one assigns the order in it.
func TestConsoleWorkingHoursAndFreeSlots(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	a.must(http.StatusOK, http.MethodPut, "/v1/settings", a.opA, map[string]any{"time_zone": "UTC"})
	// A Tuesday and the Wednesday after it, next week: wholly to come,
	// and in one week of the board.
	now := time.Now().UTC()
	monday := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC).AddDate(0, 0, 7-(int(now.Weekday())+6)%7)
	tuesday, wednesday, thursday := monday.AddDate(0, 0, 1), monday.AddDate(0, 0, 2), monday.AddDate(0, 0, 3)
	hoursPath := "/v1/staff/" + a.staffA + "/working-hours"
	// worked is the days of the pattern with shifts, as the API shows them.
	worked := func(hours map[string]any) map[string]any {
		out := map[string]any{}
		for day, shifts := range hours["week"].(map[string]any) {
			if len(shifts.([]any)) > 0 {
				out[day] = shifts
			}
		}
		return out
	}

	tb := openTab(t, a.base, 1366, 900)
	tb.signIn(a.opA, "Dispatch board")
	tb.click(`//nav//a[normalize-space(.)="Staff"]`)
	tb.click(`//table//a[normalize-space(.)="Wanda Worker"]`)
	tb.see(`//h2[normalize-space(.)="Working hours"]`)

	// A pattern with one bad day is refused whole, the problem next to
	// that day.
	tb.fill("hours-week-monday", "09:00-17:00", "hours-week-tuesday", "12:00-09:00")
	tb.button("Save weekly hours")
	tb.seeText("err", "must be after start")
	require.Equal(t, "must be after start", tb.text("#hours-week-tuesday-err"))
	require.Empty(t, worked(a.must(http.StatusOK, http.MethodGet, hoursPath, a.opA, nil).Body),
		"nothing of the refused pattern is saved")
	tb.shot("refused")

	tb.fill("hours-week-monday", "", "hours-week-tuesday", "09:00-12:00")
	tb.button("Save weekly hours")
	tb.seeText("flash", "Weekly hours saved.")
	tb.see(`//input[@id="hours-week-tuesday" and @value="09:00-12:00"]`)

	// Someone else changes the pattern meanwhile (another tab, the API):
	// this page's form, shown before, is refused and overwrites nothing.
	// The refusal shows the form as sent, with the new version: sent
	// again, knowingly, it saves.
	a.must(http.StatusOK, http.MethodPut, hoursPath, a.opA, map[string]any{"week": map[string]any{
		"tuesday": []any{map[string]any{"start": "09:00", "end": "12:00"}}, "friday": []any{map[string]any{"start": "10:00", "end": "11:00"}}}})
	tb.fill("hours-week-thursday", "14:00-16:00")
	tb.button("Save weekly hours")
	tb.seeText("problem", "is at version 2, not 1")
	require.Equal(t, []string{"friday", "tuesday"}, slices.Sorted(maps.Keys(worked(a.must(http.StatusOK, http.MethodGet, hoursPath, a.opA, nil).Body))),
		"the other change is kept")
	tb.fill("hours-week-thursday", "")
	tb.button("Save weekly hours")
	tb.seeText("flash", "Weekly hours saved.")
	require.Equal(t, []string{"tuesday"}, slices.Sorted(maps.Keys(worked(a.must(http.StatusOK, http.MethodGet, hoursPath, a.opA, nil).Body))))

	// Next Tuesday off (not with hours: refused next to them); next
	// Wednesday, not in the pattern, worked.
	tb.fill("hours-exception-date", tuesday.Format(time.DateOnly), "hours-exception-shifts", "09:00-12:00")
	tb.choose("hours-exception-reason", "holiday")
	tb.button("Add exception")
	tb.seeText("err", "must be empty for a holiday")
	require.Equal(t, "must be empty for a holiday: it is no working time", tb.text("#hours-exception-shifts-err"))
	tb.fill("hours-exception-shifts", "")
	tb.button("Add exception")
	tb.seeText("flash", fmt.Sprintf("Exception of %s (holiday) added.", tuesday.Format(time.DateOnly)))
	tb.fill("hours-exception-date", wednesday.Format(time.DateOnly), "hours-exception-shifts", "13:00-15:00")
	tb.choose("hours-exception-reason", "extra day")
	tb.button("Add exception")
	tb.seeText("flash", "(extra day) added.")
	tb.see(fmt.Sprintf(`//tr[@id="exception-%s"]/td[normalize-space(.)="13:00-15:00"]`, wednesday.Format(time.DateOnly)))
	// A sick day added by mistake, and removed.
	tb.fill("hours-exception-date", thursday.Format(time.DateOnly), "hours-exception-shifts", "")
	tb.choose("hours-exception-reason", "sick day")
	tb.button("Add exception")
	tb.seeText("flash", "(sick day) added.")
	tb.click(fmt.Sprintf(`//tr[@id="exception-%s"]//button[normalize-space(.)="Remove"]`, thursday.Format(time.DateOnly)))
	tb.seeText("flash", fmt.Sprintf("Exception of %s removed.", thursday.Format(time.DateOnly)))
	tb.shot("hours")

	hours := a.must(http.StatusOK, http.MethodGet, hoursPath, a.opA, nil).Body
	require.Equal(t, map[string]any{"tuesday": []any{map[string]any{"start": "09:00", "end": "12:00"}}}, worked(hours))
	require.Equal(t, []any{
		map[string]any{"date": tuesday.Format(time.DateOnly), "reason": "holiday", "shifts": []any{}},
		map[string]any{"date": wednesday.Format(time.DateOnly), "reason": "extra_day",
			"shifts": []any{map[string]any{"start": "13:00", "end": "15:00"}}},
	}, hours["exceptions"])

	// On the board, the order picked lists its free slots (two hours, the
	// length of an order without a wanted window): only the extra day's.
	order := a.createOrder(a.opA, a.createCustomer(a.opA, "Ada Lovelace"), 9000)
	a.awaitOrder(a.opA, order, 1)
	tb.open("/console/board?week=" + tuesday.Format(time.DateOnly) + "&order=" + order)
	slot := `//section[@id="free-slots"]//button[contains(@class,"slot")]`
	tb.see(slot)
	require.Equal(t, 1, tb.count(slot), "the holiday and the hours outside the shifts leave one slot")
	require.Equal(t, wednesday.Format("Mon 2 Jan")+" 13:00–15:00 · Wanda Worker", tb.text("#free-slots button.slot"))
	tb.shot("slots")

	tb.click(slot)
	tb.seeText("flash", "Assigned for "+wednesday.Format("Mon 2 Jan")+" 13:00–15:00.")
	assigned := a.awaitOrder(a.opA, order, 3).Body // assigned, then dispatching
	require.Equal(t, a.staffA, assigned["staff_id"])
	require.Equal(t, wednesday.Add(13*time.Hour).Format(time.RFC3339), assigned["scheduled_start_at"])
	require.Equal(t, wednesday.Add(15*time.Hour).Format(time.RFC3339), assigned["scheduled_end_at"])

	// Taken, the slot is free no more.
	tb.open("/console/board?week=" + tuesday.Format(time.DateOnly) + "&order=" + order)
	tb.seeText("empty", "No free slot of 2 h left this week")

	// Without JavaScript, the board reads the slots itself when asked.
	tb.do(chromedp.Func(func(ctx context.Context, target *chromedp.Target) error {
		_, err := cdp.Call(ctx, target, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
		return err
	}))
	tb.open("/console/board?week=" + tuesday.Format(time.DateOnly) + "&order=" + order + "&slots=1")
	tb.seeText("empty", "No free slot of 2 h left this week")
	tb.noErrors()
}
