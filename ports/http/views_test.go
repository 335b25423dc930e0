package httpport

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/access"
	"hearth/app/ops"
	"hearth/app/query"
	"hearth/domain/reference"
	"hearth/domain/webhook"
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
	require.Equal(t, `{"items":[],"total":0,"total_exact":true,"page":1,"page_size":20}`, // an array, never null
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

// The admin API's bodies (and the CLI's --json, which prints the same) are
// pinned to the JSON they have always had, when the operator's types
// carried it themselves.
func TestAdminBodiesKeepTheAPI(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	const ts = `"2026-01-02T03:04:05.000006Z"`
	const zero = `"0001-01-01T00:00:00Z"`
	for _, tc := range []struct {
		body any
		want string
	}{
		{ParkedBodyOf(ops.ParkedAggregate{Projection: "orders", StreamID: "s", StreamType: "order", MerchantID: "m",
			Reason: "r", FirstEventID: "e", FirstVersion: 2, Waiting: 3, Since: at, Attempts: 4, LastAttemptAt: at,
			Events: []ops.ParkedEvent{{EventID: "e", Type: "order.created", Version: 2, ParkedAt: at}}}),
			`{"projection":"orders","stream_id":"s","stream_type":"order","merchant_id":"m","reason":"r","first_event_id":"e","first_version":2,"waiting":3,"since":` + ts + `,"attempts":4,"last_attempt_at":` + ts + `,"events":[{"event_id":"e","type":"order.created","version":2,"parked_at":` + ts + `}]}`},
		{ParkedBodyOf(ops.ParkedAggregate{Events: []ops.ParkedEvent{}}),
			`{"projection":"","stream_id":"","stream_type":"","merchant_id":"","reason":"","first_event_id":"","first_version":0,"waiting":0,"since":` + zero + `,"attempts":0,"last_attempt_at":` + zero + `}`},
		{replayBodyOf(ops.ReplayResult{Projection: "orders", StreamID: "s", Applied: 1, Waiting: 2, Error: "boom"}),
			`{"projection":"orders","stream_id":"s","applied":1,"unparked":false,"waiting":2,"error":"boom"}`},
		{replayBodyOf(ops.ReplayResult{Unparked: true}),
			`{"projection":"","stream_id":"","applied":0,"unparked":true,"waiting":0}`},
		{skipBodyOf(ops.SkipResult{Projection: "orders", StreamID: "s", EventID: "e", Version: 2, Type: "t", SkippedBy: "b",
			Reason: "r", Waiting: 1, Unparked: true}),
			`{"projection":"orders","stream_id":"s","event_id":"e","version":2,"type":"t","skipped_by":"b","reason":"r","waiting":1,"unparked":true}`},
		{rebuildBodyOf(ops.RebuildProgress{Projection: "orders", Phase: "fold", Events: 1, Total: 2, Rows: 3, Rate: 1.5,
			ETA: "1s", StartedAt: at, FinishedAt: at, Error: "x"}),
			`{"projection":"orders","phase":"fold","events":1,"total":2,"rows":3,"events_per_second":1.5,"eta":"1s","started_at":` + ts + `,"finished_at":` + ts + `,"error":"x"}`},
		{rebuildBodyOf(ops.RebuildProgress{}),
			`{"projection":"","phase":"","events":0,"total":0,"rows":0,"events_per_second":0,"started_at":` + zero + `}`},
		{AuditEntryBodyOf(ops.AuditEntry{ID: 1, At: at, Actor: "a", Action: "key.create", Target: "t", Details: map[string]any{"b": 1, "a": "x"}}),
			`{"id":1,"at":` + ts + `,"actor":"a","action":"key.create","target":"t","details":{"a":"x","b":1}}`},
		{AuditEntryBodyOf(ops.AuditEntry{}),
			`{"id":0,"at":` + zero + `,"actor":"","action":"","target":"","details":null}`},
		{KeyBodyOf(testKey(at)),
			`{"id":"k","merchant_id":"m","merchant_name":"Acme","role":"worker","staff_id":"s","name":"n","created_at":` + ts + `,"last_used_at":` + ts + `,"expires_at":` + ts + `,"revoked_at":` + ts + `}`},
		{KeyBodyOf(access.Key{}),
			`{"id":"","role":"","name":"","created_at":` + zero + `,"last_used_at":null,"expires_at":null,"revoked_at":null}`},
		{newKeyBodyOf(access.NewKey{Key: access.Key{ID: "k", Role: access.Admin, CreatedAt: at}, Secret: "hk_x"}),
			`{"id":"k","role":"admin","name":"","created_at":` + ts + `,"last_used_at":null,"expires_at":null,"revoked_at":null,"secret":"hk_x"}`},
		{rotationBodyOf(access.Rotation{NewKey: access.NewKey{Key: testKey(at), Secret: "hk_x"}, Previous: access.Key{ID: "old"}}),
			`{"id":"k","merchant_id":"m","merchant_name":"Acme","role":"worker","staff_id":"s","name":"n","created_at":` + ts + `,"last_used_at":` + ts + `,"expires_at":` + ts + `,"revoked_at":` + ts + `,"secret":"hk_x","previous":{"id":"old","role":"","name":"","created_at":` + zero + `,"last_used_at":null,"expires_at":null,"revoked_at":null}}`},
	} {
		require.Equal(t, tc.want, jsonOf(t, tc.body))
	}
}

func testKey(at time.Time) access.Key {
	return access.Key{ID: "k", MerchantID: "m", MerchantName: "Acme", Role: access.Worker, StaffID: "s", Name: "n",
		CreatedAt: at, LastUsedAt: &at, ExpiresAt: &at, RevokedAt: &at}
}

// previous_secret_expires_at says until when any earlier secret signs:
// after a rotation with a long overlap and, during it, one with a short
// overlap that has ended, the first secret still signs, until the end of
// its own overlap.
func TestWebhookEndpointBodySaysUntilWhenEarlierSecretsSign(t *testing.T) {
	now := time.Now()
	e := webhook.Endpoint{ID: "e", Secret: webhook.NewSecret(), Enabled: true, Version: 1}
	first := e.Secret
	require.NoError(t, e.Rotate(webhook.NewSecret(), now.Add(-2*time.Hour), 168*time.Hour))
	require.NoError(t, e.Rotate(webhook.NewSecret(), now.Add(-90*time.Minute), time.Hour))
	signing := e.Secrets(now)
	require.Len(t, signing, 2, "the current secret and the first one sign")
	require.Contains(t, signing, first)
	body := webhookEndpointBodyOf(e)
	require.NotNil(t, body.PreviousSecretExpiresAt, "an earlier secret still signs (until %s) but the answer says none does", e.OlderSecretUntil)
	require.Equal(t, *e.OlderSecretUntil, *body.PreviousSecretExpiresAt)

	// Both earlier secrets sign: the later end.
	e = webhook.Endpoint{ID: "e", Secret: webhook.NewSecret(), Enabled: true, Version: 1}
	require.NoError(t, e.Rotate(webhook.NewSecret(), now.Add(-time.Hour), 2*time.Hour))
	require.NoError(t, e.Rotate(webhook.NewSecret(), now, 24*time.Hour))
	require.Len(t, e.Secrets(now), 3)
	require.Equal(t, now.Add(24*time.Hour), *webhookEndpointBodyOf(e).PreviousSecretExpiresAt)

	// Only the current secret signs: absent.
	require.NoError(t, e.Rotate(webhook.NewSecret(), now, 0))
	require.Nil(t, webhookEndpointBodyOf(e).PreviousSecretExpiresAt)
}

// A cursor names its list by path, scope and filters: repeated values in
// another order, the page's size and place, min_position and an empty q
// leave it the same list; another path, merchant, staff member or filter
// value does not.
func TestACursorsListIsItsPathScopeAndFilters(t *testing.T) {
	list := func(target, merchant, staff string) string {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		role := access.Operator
		if staff != "" {
			role = access.Worker
		}
		r = r.WithContext(context.WithValue(r.Context(), principalKey{}, access.Principal{MerchantID: merchant, StaffID: staff, Role: role}))
		return newParams(r).list()
	}
	const m, other, staff = "00000000-0000-4000-8000-00000000000a", "00000000-0000-4000-8000-00000000000b", "00000000-0000-4000-8000-0000000000c1"
	base := list("/v1/orders?status=pending&status=confirmed&from=2030-01-01T00:00:00Z", m, "")
	for _, same := range []string{
		"/v1/orders?status=confirmed&status=pending&from=2030-01-01T00:00:00Z",
		"/v1/orders?from=2030-01-01T00:00:00Z&status=pending&status=confirmed&page_size=7&cursor=x&min_position=1&q=",
	} {
		require.Equal(t, base, list(same, m, ""), same)
	}
	for _, c := range []struct{ target, merchant, staff string }{
		{"/v1/schedules?status=pending&status=confirmed&from=2030-01-01T00:00:00Z", m, ""},
		{"/v1/orders?status=pending&from=2030-01-01T00:00:00Z", m, ""},
		{"/v1/orders?status=pending&status=confirmed&from=2030-01-01T01:00:00%2B01:00", m, ""},
		{"/v1/orders?status=pending&status=confirmed", m, ""},
		{"/v1/orders?status=pending&status=confirmed&from=2030-01-01T00:00:00Z", other, ""},
		{"/v1/orders?status=pending&status=confirmed&from=2030-01-01T00:00:00Z", m, staff},
	} {
		require.NotEqual(t, base, list(c.target, c.merchant, c.staff), "%+v", c)
	}
	next := &query.Cursor{Order: "created_at", At: time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC), ID: "00000000-0000-4000-8000-000000000001", List: base}
	back, ok := parseCursor(FormatCursor(next))
	require.True(t, ok)
	require.Equal(t, next, back)
}
