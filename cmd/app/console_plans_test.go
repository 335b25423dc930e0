package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// setValue sets a field's value by id, whatever its type (time fields type
// by locale).
func (tb *tab) setValue(id, v string) {
	tb.t.Helper()
	tb.do(chromedp.WaitVisible(chromedp.ID(id)))
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => { document.getElementById(%q).value = %q; return true; })()`, id, v)))
	require.NoError(tb.t, err)
}

// A dispatcher's plan: a plan refused with the problem next to its window,
// then created with a preferred staff member; its coming visits listed in
// the merchant's time zone; one skipped, one moved.
func TestConsolePlans(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	a.must(http.StatusOK, http.MethodPut, "/v1/settings", a.opA, map[string]any{"time_zone": "Europe/London"})
	a.createCustomer(a.opA, "Ada Lovelace")
	a.crmCreate(a.opA, "/v1/catalog-items", map[string]any{"name": "Weekly clean", "base_price_cents": 4500})
	london, err := time.LoadLocation("Europe/London")
	require.NoError(t, err)
	first := time.Now().In(london).AddDate(0, 0, 2)
	day := func(n int) string { return first.AddDate(0, 0, 7*n).Format(time.DateOnly) }

	tb := openTab(t, a.base, 1366, 900)
	tb.signIn(a.opA, "Dispatch board")
	tb.click(`//nav//a[normalize-space(.)="Plans"]`)
	tb.see(`//h1[normalize-space(.)="Service plans"]`)
	tb.choose("new-plan-customer_id", "Ada Lovelace")
	tb.choose("new-plan-catalog_item_id", "Weekly clean")
	tb.choose("new-plan-staff_id", "Wanda Worker")
	tb.setValue("new-plan-window_start", "11:00")
	tb.setValue("new-plan-window_end", "09:00")
	tb.setValue("new-plan-recurrence_start", day(0))
	tb.setValue("new-plan-recurrence_count", "4")
	tb.button("Create plan")
	tb.seeText("err", "must be after window.start")
	require.Equal(t, "must be after window.start", tb.text("#new-plan-window_end-err"))
	tb.shot("refused")

	tb.setValue("new-plan-window_start", "09:00")
	tb.setValue("new-plan-window_end", "11:00")
	tb.button("Create plan")
	tb.seeText("flash", "Plan created.")
	tb.see(`//h1[normalize-space(.)="Plan of Ada Lovelace"]`)
	for n := range 4 {
		tb.see(fmt.Sprintf(`//tr[@id="visit-%s"]/td[normalize-space(.)="09:00–11:00"]`, day(n)))
	}
	tb.shot("plan")

	tb.click(fmt.Sprintf(`//tr[@id="visit-%s"]//button[normalize-space(.)="Skip"]`, day(1)))
	tb.seeText("flash", fmt.Sprintf("Visit of %s skipped.", day(1)))
	tb.setValue("visit-"+day(2)+"-start", "14:30")
	tb.click(fmt.Sprintf(`//tr[@id="visit-%s"]//button[normalize-space(.)="Move"]`, day(2)))
	tb.seeText("flash", fmt.Sprintf("Visit of %s moved.", day(2)))
	tb.see(fmt.Sprintf(`//tr[@id="visit-%s"]/td[normalize-space(.)="14:30–16:30"]`, day(2)))
	tb.see(fmt.Sprintf(`//tr[@id="visit-%s"]//span[normalize-space(.)="moved"]`, day(2)))
	require.Equal(t, 3, tb.count(`//table[contains(@class,"visits")]/tbody/tr`), "the skipped visit is gone")
	tb.shot("skipped-and-moved")
	tb.noErrors()
}

// count counts the elements the XPath expression finds.
func (tb *tab) count(expr string) int {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(
		`document.evaluate(%q, document, null, XPathResult.ORDERED_NODE_SNAPSHOT_TYPE, null).snapshotLength`, expr)))
	require.NoError(tb.t, err)
	return n
}
