package httpport

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/query"
	"hearth/domain/reference"
)

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// The response types are the API: their JSON is the JSON the API has
// always sent. The views' own JSON (the change log's stored snapshot
// format) had the same members, names included, before the API had types
// of its own.
func TestViewBodiesKeepTheAPI(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	s := func(v string) *string { return &v }
	o := query.Order{ID: "o", MerchantID: "m", RequestID: s("r"), CustomerID: "c", CustomerName: "Ann",
		AmountCents: 1, Status: "new", ScheduledStartAt: &at, ScheduledEndAt: &at, StaffID: s("st"), StaffName: "Bo",
		DispatchNote: "d", CancellationReason: "x", CompletedAt: &at, SettlementStatus: "settled", PaidAmountCents: 2,
		PaymentMethod: "cash", PaidAt: &at, SettlementNote: "n", Notes: "no", CreatedAt: at, UpdatedAt: at, Version: 3}
	require.Equal(t, jsonOf(t, o), jsonOf(t, orderBodyOf(o)))
	require.Equal(t, jsonOf(t, query.Order{}), jsonOf(t, orderBodyOf(query.Order{})))
	r := query.ServiceRequest{ID: "r", MerchantID: "m", CustomerID: "c", CustomerName: "Ann", CatalogItemID: s("i"),
		CatalogItemName: "Tap", Content: "c", AppointmentStartAt: &at, AppointmentEndAt: &at, Status: "new",
		Source: "phone", Notes: "n", OrderID: s("o"), CreatedAt: at, UpdatedAt: at, Version: 2}
	require.Equal(t, jsonOf(t, r), jsonOf(t, serviceRequestBodyOf(r)))
	require.Equal(t, jsonOf(t, query.ServiceRequest{}), jsonOf(t, serviceRequestBodyOf(query.ServiceRequest{})))
	sch := query.Schedule{ID: "s", MerchantID: "m", OrderID: "o", StaffID: "st", StaffName: "Bo", StartAt: at,
		EndAt: at, Status: "planned", Notes: "n", CreatedAt: at, UpdatedAt: at, Version: 1}
	require.Equal(t, jsonOf(t, sch), jsonOf(t, scheduleBodyOf(sch)))
	require.Equal(t, jsonOf(t, query.Schedule{}), jsonOf(t, scheduleBodyOf(query.Schedule{})))
}

func TestRecordAndListBodiesKeepTheAPI(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	const ts = `"2026-01-02T03:04:05.000006Z"`
	require.Equal(t, `{"id":"c","name":"Ann","phone":"1","email":"a@b","address":"x","notes":"n","created_at":`+ts+`,"updated_at":`+ts+`}`,
		jsonOf(t, customerBodyOf(reference.Customer{ID: "c", MerchantID: "m", Name: "Ann", Phone: "1", Email: "a@b",
			Address: "x", Notes: "n", CreatedAt: at, UpdatedAt: at})))
	require.Equal(t, `{"id":"s","name":"Bo","phone":"1","active":true,"created_at":`+ts+`,"updated_at":`+ts+`}`,
		jsonOf(t, staffBodyOf(reference.StaffMember{ID: "s", MerchantID: "m", Name: "Bo", Phone: "1", Active: true,
			CreatedAt: at, UpdatedAt: at})))
	require.Equal(t, `{"id":"i","name":"Tap","base_price_cents":5,"active":false,"created_at":`+ts+`,"updated_at":`+ts+`}`,
		jsonOf(t, catalogItemBodyOf(reference.CatalogItem{ID: "i", MerchantID: "m", Name: "Tap", BasePriceCents: 5,
			CreatedAt: at, UpdatedAt: at})))
	require.Equal(t, `{"event_id":"e","aggregate_type":"order","aggregate_id":"o","version":1,"action":"order.created","actor":"key:k","before":null,"after":{"id":"o"},"occurred_at":`+ts+`}`,
		jsonOf(t, changeBodyOf(query.Change{EventID: "e", AggregateType: "order", AggregateID: "o", Version: 1,
			Action: "order.created", Actor: "key:k", After: json.RawMessage(`{"id":"o"}`), OccurredAt: at})))
	id := func(v string) string { return v }
	require.Equal(t, `{"items":["a"],"total":1,"total_exact":true,"page":1,"page_size":20}`,
		jsonOf(t, listBodyOf(query.List[string]{Items: []string{"a"}, Total: 1, TotalExact: true, Page: 1, PageSize: 20}, id)))
	require.Equal(t, `{"items":null,"total":0,"total_exact":true,"page":1,"page_size":20}`,
		jsonOf(t, listBodyOf(query.List[string]{TotalExact: true, Page: 1, PageSize: 20}, id)))
	// After a cursor: no page number; the next page's cursor.
	next := &query.Cursor{Order: "created_at", At: at, ID: "00000000-0000-4000-8000-000000000001"}
	body := jsonOf(t, listBodyOf(query.List[string]{Items: []string{"a"}, Total: 10000, PageSize: 1, Next: next}, id))
	require.Equal(t, `{"items":["a"],"total":10000,"total_exact":false,"page_size":1,"next_cursor":"`+FormatCursor(next)+`"}`, body)
	back, ok := parseCursor(FormatCursor(next))
	require.True(t, ok)
	require.Equal(t, next, back)
}

// A cursor from a client is read or refused, never trusted blindly: what
// parses is a cursor that formats back to an equivalent token.
func FuzzCursor(f *testing.F) {
	f.Add(FormatCursor(&query.Cursor{Order: "created_at", At: time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC), ID: "00000000-0000-4000-8000-000000000001"}))
	for _, s := range []string{"", "e30", "bm90IGEgY3Vyc29y", "eyJvIjoieCJ9", "%%%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		c, ok := parseCursor(token)
		if !ok {
			require.Nil(t, c)
			return
		}
		require.NotEmpty(t, c.Order)
		again, ok := parseCursor(FormatCursor(c))
		require.True(t, ok)
		require.Equal(t, c.Order, again.Order)
		require.Equal(t, c.ID, again.ID)
		require.True(t, c.At.Equal(again.At))
	})
}
