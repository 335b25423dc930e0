package main

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// invalidFields returns the fields a 422 names.
func invalidFields(t *testing.T, r response) []string {
	t.Helper()
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, r.String())
	return problemFields(r)
}

// A plan through the API: created in the merchant's time zone, read back
// from the read model, changed, skipped, moved, paused, resumed and ended;
// bad input names its field and creates nothing.
func TestPlansAPI(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	item := a.crmCreate(a.opA, "/v1/catalog-items", map[string]any{"name": "Fortnightly clean", "base_price_cents": 4500})

	a.must(http.StatusOK, http.MethodPut, "/v1/settings", a.opA, map[string]any{"time_zone": "Europe/London"})
	require.Equal(t, []string{"time_zone"}, invalidFields(t, a.do(http.MethodPut, "/v1/settings", a.opA, map[string]any{"time_zone": "Mars/Olympus"})))
	require.Equal(t, "Europe/London", a.must(http.StatusOK, http.MethodGet, "/v1/settings", a.opA, nil).Body["time_zone"])

	start := time.Now().UTC().AddDate(0, 0, 7).Format(time.DateOnly)
	valid := func(change func(b map[string]any)) map[string]any {
		b := map[string]any{"customer_id": customer, "catalog_item_id": item, "staff_id": a.staffA,
			"window":     map[string]any{"start": "09:00", "end": "11:00"},
			"recurrence": map[string]any{"frequency": "weekly", "interval": 2, "start": start}}
		if change != nil {
			change(b)
		}
		return b
	}
	bad := []struct {
		name   string
		change func(b map[string]any)
		fields []string
	}{
		{"a recurrence with no visit", func(b map[string]any) {
			b["recurrence"] = map[string]any{"frequency": "monthly", "interval": 1, "month_day": 31, "start": start, "until": start}
		}, []string{"recurrence.until"}},
		{"an end before the start", func(b map[string]any) {
			b["recurrence"] = map[string]any{"frequency": "daily", "interval": 1, "start": start, "until": "2020-01-01"}
		}, []string{"recurrence.until"}},
		{"a window ending before it starts", func(b map[string]any) {
			b["window"] = map[string]any{"start": "11:00", "end": "09:00"}
		}, []string{"window.end"}},
		{"a window longer than a day", func(b map[string]any) {
			b["window"] = map[string]any{"start": "09:00", "end": "33:00"}
		}, []string{"window.end"}},
		{"no frequency, a foreign staff member", func(b map[string]any) {
			b["recurrence"] = map[string]any{"interval": 1, "start": start}
			b["staff_id"] = a.staffB
		}, []string{"staff_id", "recurrence.frequency"}},
	}
	for _, tc := range bad {
		got := invalidFields(t, a.do(http.MethodPost, "/v1/plans", a.opA, valid(tc.change)))
		require.ElementsMatch(t, tc.fields, got, tc.name)
	}

	created := a.must(http.StatusCreated, http.MethodPost, "/v1/plans", a.opA, valid(nil))
	id := created.Body["id"].(string)
	require.Equal(t, "Europe/London", created.Body["time_zone"])
	require.EqualValues(t, 4500, created.Body["price_cents"], "the catalog item's price")
	pos := fmt.Sprint(created.Body["position"])

	list := a.must(http.StatusOK, http.MethodGet, "/v1/plans?min_position="+pos, a.opA, nil)
	require.EqualValues(t, 1, list.Body["total"], "nothing half-created by the refused requests: %s", list)
	got := a.must(http.StatusOK, http.MethodGet, "/v1/plans/"+id+"?min_position="+pos, a.opA, nil)
	require.Equal(t, "Ada Lovelace", got.Body["customer_name"])
	require.Equal(t, "active", got.Body["status"])
	a.must(http.StatusNotFound, http.MethodGet, "/v1/plans/"+id, a.opB, nil)
	visits := a.must(http.StatusOK, http.MethodGet, "/v1/plans/"+id+"/visits", a.opA, nil).Body["items"].([]any)
	london, err := time.LoadLocation("Europe/London")
	require.NoError(t, err)
	var dates []string
	for _, v := range visits {
		dates = append(dates, v.(map[string]any)["date"].(string))
		at, err := time.Parse(time.RFC3339, v.(map[string]any)["start_at"].(string))
		require.NoError(t, err)
		require.Equal(t, "09:00", at.In(london).Format("15:04"), "09:00 in London")
	}
	d0, _ := time.Parse(time.DateOnly, start)
	require.Equal(t, []string{start, d0.AddDate(0, 0, 14).Format(time.DateOnly), d0.AddDate(0, 0, 28).Format(time.DateOnly),
		d0.AddDate(0, 0, 42).Format(time.DateOnly)}, dates, "every other week, the next 8 weeks")
	a.must(http.StatusNotFound, http.MethodGet, "/v1/plans/"+id+"/visits", a.opB, nil)
	// A year is at most a year on the plan's clock too: from midnight BST on
	// 30 October 2027 to midnight GMT a (leap) year later is 366 days and an
	// hour.
	year := "?from=2027-10-30T00:00:00%2B01:00&to=2028-10-30T00:00:00Z"
	a.must(http.StatusOK, http.MethodGet, "/v1/plans/"+id+"/visits"+year, a.opA, nil)
	require.Equal(t, []string{"to"}, invalidFields(t, a.do(http.MethodGet, "/v1/plans/"+id+"/visits?from=2027-10-30T00:00:00%2B01:00&to=2028-10-30T00:01:00Z", a.opA, nil)),
		"a minute more is too long")

	a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+id+"/skip", a.opA, map[string]any{"date": start})
	second := time.Now().UTC().AddDate(0, 0, 21).Format(time.DateOnly)
	moved := a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+id+"/move", a.opA,
		map[string]any{"date": second, "to_date": second, "start": "14:00"})
	require.Equal(t, []any{start}, moved.Body["skipped"])
	require.Len(t, moved.Body["moved"], 1)
	require.ElementsMatch(t, []string{"date"}, invalidFields(t, a.do(http.MethodPost, "/v1/plans/"+id+"/skip", a.opA, map[string]any{"date": "not-a-date"})))
	changed := a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+id+"/change", a.opA,
		map[string]any{"from": second, "price_cents": 5000, "window": map[string]any{"start": "10:00", "end": "12:00"}})
	require.Equal(t, second, changed.Body["changed_from"])
	require.EqualValues(t, 5000, changed.Body["price_cents"])
	for _, step := range []struct{ path, status string }{{"pause", "paused"}, {"resume", "active"}, {"end", "ended"}} {
		r := a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+id+"/"+step.path, a.opA, nil)
		require.Equal(t, step.status, r.Body["status"])
	}
	r := a.do(http.MethodPost, "/v1/plans/"+id+"/skip", a.opA, map[string]any{"date": second})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, r.String())
	require.Contains(t, r.Raw, "service_plan.ended")
}

// Working hours and the bookable slots: inside the hours, around a booked
// job with its buffer, and 422 naming the field for a bad duration or
// range.
func TestAvailabilityAPI(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	a.must(http.StatusOK, http.MethodPut, "/v1/settings", a.opA, map[string]any{"time_zone": "Europe/London"})
	hours := a.must(http.StatusOK, http.MethodPut, "/v1/staff/"+a.staffA+"/working-hours", a.opA, map[string]any{
		"week": map[string]any{"monday": []any{map[string]any{"start": "09:00", "end": "13:00"}}},
	})
	require.Len(t, hours.Body["week"].(map[string]any)["monday"], 1)
	require.ElementsMatch(t, []string{"week.tuesday[0].end"}, invalidFields(t, a.do(http.MethodPut, "/v1/staff/"+a.staffA+"/working-hours", a.opA,
		map[string]any{"week": map[string]any{"tuesday": []any{map[string]any{"start": "09:00", "end": "08:00"}}}})))
	a.must(http.StatusNotFound, http.MethodPut, "/v1/staff/"+a.staffB+"/working-hours", a.opA, map[string]any{})

	// Next Monday in London (GMT or BST: the slots are local 09:00 on).
	day := time.Now().UTC().AddDate(0, 0, 1)
	for day.Weekday() != time.Monday {
		day = day.AddDate(0, 0, 1)
	}
	london, err := time.LoadLocation("Europe/London")
	require.NoError(t, err)
	at := func(h int) time.Time { return time.Date(day.Year(), day.Month(), day.Day(), h, 0, 0, 0, london) }
	from, to := at(0).UTC().Format(time.RFC3339), at(24).UTC().Format(time.RFC3339)
	slots := func(query string) []string {
		r := a.must(http.StatusOK, http.MethodGet, "/v1/availability?from="+from+"&to="+to+"&staff_id="+a.staffA+query, a.opA, nil)
		var out []string
		for _, s := range r.Body["items"].([]any) {
			st, err := time.Parse(time.RFC3339, s.(map[string]any)["start_at"].(string))
			require.NoError(t, err)
			out = append(out, st.In(london).Format("15:04"))
		}
		return out
	}
	require.Equal(t, []string{"09:00", "10:00", "11:00"}, slots("&duration=2h&step=60"))

	// A job 10:00-11:00 with a 30-minute buffer leaves 11:30 to 13:00.
	customer := a.createCustomer(a.opA, "Bob")
	order := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{"customer_id": customer, "amount_cents": 100})
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order.Body["id"].(string)+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": at(10).Format(time.RFC3339), "end_at": at(11).Format(time.RFC3339)})
	require.Equal(t, []string{"11:30"}, slots("&duration=90m&step=30&buffer=30"))
	require.Equal(t, []string{"09:00", "11:00", "12:00"}, slots("&duration=60&step=60"))

	for query, field := range map[string]string{
		"&duration=0":    "duration",
		"&duration=1441": "duration",
	} {
		r := a.do(http.MethodGet, "/v1/availability?from="+from+"&to="+to+query, a.opA, nil)
		require.True(t, slices.Contains(invalidFields(t, r), field), "%s: %s", query, r)
	}
	// 2^53 + 60 minutes, in nanoseconds, would wrap around to 60 minutes.
	for query, field := range map[string]string{
		"&duration=9007199254741052":         "duration",
		"&duration=60&step=9007199254741052": "step",
	} {
		r := a.do(http.MethodGet, "/v1/availability?from="+from+"&to="+to+query, a.opA, nil)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", query, r)
		require.Equal(t, []string{field}, problemFields(r), query)
	}
	r := a.do(http.MethodGet, "/v1/availability?duration=60&from="+to+"&to="+from, a.opA, nil)
	require.Contains(t, invalidFields(t, r), "to")

	// The range is at most 31 days on the merchant's clock: October in
	// London, from midnight BST to midnight GMT, is 31 days and an hour.
	october := "&from=2027-10-01T00:00:00%2B01:00&to=2027-11-01T00:00:00Z"
	r = a.do(http.MethodGet, "/v1/availability?duration=60&staff_id="+a.staffA+october, a.opA, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r)
	require.NotEmpty(t, r.Body["items"], "%s", r)
	r = a.do(http.MethodGet, "/v1/availability?duration=60&from=2027-10-01T00:00:00%2B01:00&to=2027-11-01T00:01:00Z", a.opA, nil)
	require.Equal(t, []string{"to"}, invalidFields(t, r), "a minute more is too long")
}

// A step given as 0 (in minutes or as a duration) is no grid: 422 naming
// step, as for any other step that does not divide a day. Only a step not
// given at all is the default 15 minutes.
func TestAvailabilityRefusesAStepOfZero(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	a.must(http.StatusOK, http.MethodPut, "/v1/staff/"+a.staffA+"/working-hours", a.opA, map[string]any{
		"week": map[string]any{"friday": []any{map[string]any{"start": "09:00", "end": "10:00"}}},
	})
	const rng = "duration=30&from=2027-01-01T00:00:00Z&to=2027-01-02T00:00:00Z"
	for _, step := range []string{"0", "0m", "0h"} {
		r := a.do(http.MethodGet, "/v1/availability?"+rng+"&step="+step, a.opA, nil)
		require.Equal(t, []string{"step"}, invalidFields(t, r), "step=%s", step)
	}
	r := a.must(http.StatusOK, http.MethodGet, "/v1/availability?"+rng, a.opA, nil)
	require.Len(t, r.Body["items"], 3, "09:00, 09:15 and 09:30 on the default grid: %s", r)
}

// A date written YYYY-MM-DD that is no day of the calendar (29 February of
// a common year, 31 April) is refused naming its field and saying why: the
// client wrote the form asked for, and "must be a date written YYYY-MM-DD"
// would send them looking for a typo.
func TestADateThatIsNoDayOfTheCalendarIsSaidSo(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	item := a.crmCreate(a.opA, "/v1/catalog-items", map[string]any{"name": "Clean", "base_price_cents": 4500})
	message := func(r response, field string) string {
		t.Helper()
		require.Equal(t, []string{field}, invalidFields(t, r))
		return r.Body["errors"].([]any)[0].(map[string]any)["message"].(string)
	}
	r := a.do(http.MethodPost, "/v1/plans", a.opA, map[string]any{"customer_id": customer, "catalog_item_id": item,
		"window":     map[string]any{"start": "09:00", "end": "11:00"},
		"recurrence": map[string]any{"frequency": "weekly", "interval": 1, "start": "2027-02-29", "count": 4}})
	require.Equal(t, `is no day of the calendar: February 2027 has 28 days, got "2027-02-29"`, message(r, "recurrence.start"))
	r = a.do(http.MethodPut, "/v1/staff/"+a.staffA+"/working-hours", a.opA, map[string]any{
		"exceptions": []map[string]any{{"date": "2027-04-31", "reason": "holiday"}}})
	require.Equal(t, `is no day of the calendar: April 2027 has 30 days, got "2027-04-31"`, message(r, "exceptions[0].date"))
	r = a.do(http.MethodPost, "/v1/plans", a.opA, map[string]any{"customer_id": customer, "catalog_item_id": item,
		"window":     map[string]any{"start": "09:00", "end": "11:00"},
		"recurrence": map[string]any{"frequency": "weekly", "interval": 1, "start": "2027-13-01", "count": 4}})
	require.Equal(t, `is no day of the calendar: a year has 12 months, got "2027-13-01"`, message(r, "recurrence.start"))
	r = a.do(http.MethodPost, "/v1/plans", a.opA, map[string]any{"customer_id": customer, "catalog_item_id": item,
		"window":     map[string]any{"start": "09:00", "end": "11:00"},
		"recurrence": map[string]any{"frequency": "weekly", "interval": 1, "start": "1 March 2027", "count": 4}})
	require.Equal(t, `must be a date written YYYY-MM-DD, got "1 March 2027"`, message(r, "recurrence.start"))
}
