package ops_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/ops"
	"hearth/app/publicevent"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/reference"
	"hearth/domain/webhook"
)

const (
	exportMerchant = "00000000-0000-4000-8000-000000000001"
	exportCustomer = "00000000-0000-4000-8000-0000000000c1"
	exportOrder    = "00000000-0000-4000-8000-0000000000a1"
	exportEvent    = "00000000-0000-4000-8000-0000000000e1"
	exportPlan     = "00000000-0000-4000-8000-0000000000b1"
)

// fakeExport answers both adapters' reads; the event store's records the
// entry its audit function returns, as the adapter does in its
// transaction.
type fakeExport struct {
	rows       ops.ExportRows
	history    ops.ExportHistory
	calls      int
	aggregates []string
	entries    []ops.AuditEntry
}

func (f *fakeExport) CustomerRows(context.Context, string, string, int) (ops.ExportRows, error) {
	f.calls++
	return f.rows, nil
}

func (f *fakeExport) CustomerHistory(_ context.Context, _, _ string, ids []string, _ int, audit func(ops.ExportHistory) ops.AuditEntry) (ops.ExportHistory, error) {
	f.calls++
	f.aggregates = ids
	f.entries = append(f.entries, audit(f.history))
	return f.history, nil
}

func exportFake() *fakeExport {
	at := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	stored := publicevent.Stored{Position: 7, Recorded: event.Recorded{
		Envelope: event.Envelope{ID: exportEvent, Type: "OrderCreated", StreamType: order.StreamType, StreamID: exportOrder,
			Version: 1, MerchantID: exportMerchant, OccurredAt: at},
		Event: order.Created{OrderID: exportOrder, CustomerID: exportCustomer, Notes: "secret note", Status: order.StatusPending}}}
	return &fakeExport{
		rows: ops.ExportRows{Orders: []query.Order{{ID: exportOrder, CustomerID: exportCustomer, Notes: "secret note"}},
			Plans: []query.Plan{{ID: exportPlan, CustomerID: exportCustomer}}},
		history: ops.ExportHistory{At: at, Customer: reference.Customer{ID: exportCustomer, Name: "Ada Secret"},
			Events: []publicevent.Stored{stored},
			WebhookDeliveries: []ops.StoredDelivery{{URL: "https://example.com/hook",
				Delivery: webhook.Delivery{ID: "d1", EventID: exportEvent, AggregateID: exportOrder, AggregateVersion: 1}}}},
	}
}

// An export holds the rows (service plans included), the events in public form and each delivery
// with the payload it sends, and records who exported which customer with
// counts only.
func TestExportCustomer(t *testing.T) {
	f := exportFake()
	x, err := ops.NewExports(f, f, 0)
	require.NoError(t, err)
	got, err := x.ExportCustomer(t.Context(), ops.ExportRequest{By: " key:k1 ", MerchantID: exportMerchant, CustomerID: exportCustomer})
	require.NoError(t, err)
	require.Equal(t, ops.ExportSchema, got.Schema)
	require.Equal(t, f.history.At, got.ExportedAt)
	require.Equal(t, []string{exportOrder, exportPlan}, f.aggregates, "the event store reads the aggregates the read models name")
	require.Equal(t, f.rows.Plans, got.Plans)
	require.Len(t, got.Events, 1)
	require.Equal(t, publicevent.OrderCreated, got.Events[0].Type)
	require.Equal(t, int64(7), got.Events[0].Position)
	require.Len(t, got.WebhookDeliveries, 1)
	require.Equal(t, got.Events[0], got.WebhookDeliveries[0].Payload)
	require.Equal(t, "https://example.com", got.WebhookDeliveries[0].URL, "the endpoint's origin only")

	require.Equal(t, []ops.AuditEntry{{Actor: "key:k1", Action: ops.ActionCustomerExport, Target: "customer/" + exportCustomer,
		Details: map[string]any{"merchant_id": exportMerchant, "service_requests": 0, "orders": 1, "plans": 1, "schedules": 0,
			"change_log": 0, "events": 1, "webhook_deliveries": 1}}}, f.entries)
}

// Bad input is refused before anything is read.
func TestExportCustomerBadInput(t *testing.T) {
	f := exportFake()
	x, err := ops.NewExports(f, f, 0)
	require.NoError(t, err)
	for _, req := range []ops.ExportRequest{
		{By: "key:k1", MerchantID: exportMerchant, CustomerID: "nope"},
		{By: " ", MerchantID: exportMerchant, CustomerID: exportCustomer},
	} {
		_, err := x.ExportCustomer(t.Context(), req)
		var invalid *apperr.ValidationError
		require.ErrorAs(t, err, &invalid, "%+v", req)
	}
	require.Zero(t, f.calls)
	require.Empty(t, f.entries)
}

// An export shows each delivery's endpoint by its scheme, host and port
// only: the export is handed to the customer, and an endpoint's URL may
// carry the receiver's credentials (userinfo, a token in the path or the
// query). The host is what tells the customer who got their data.
func TestExportShowsOnlyTheEndpointsOrigin(t *testing.T) {
	for stored, shown := range map[string]string{
		"https://user:s3cret@hooks.example.com:8443/t/tok_live_123/in?key=abc&sig=def": "https://hooks.example.com:8443",
		"http://example.com/hook":                      "http://example.com",
		"https://example.com?token=abc":                "https://example.com",
		"https://[2001:db8::1]:9000/hooks/tok_123?x=y": "https://[2001:db8::1]:9000",
		"https://token@example.com":                    "https://example.com",
	} {
		f := exportFake()
		f.history.WebhookDeliveries[0].URL = stored
		x, err := ops.NewExports(f, f, 0)
		require.NoError(t, err)
		got, err := x.ExportCustomer(t.Context(), ops.ExportRequest{By: "key:k1", MerchantID: exportMerchant, CustomerID: exportCustomer})
		require.NoError(t, err)
		require.Equal(t, shown, got.WebhookDeliveries[0].URL, stored)
	}
}

// An export says what happened to each delivery in general terms, from
// what Hearth knows itself (the receiver's status, whether it answered,
// whether the delivery was sent at all), never with the delivery log's
// error text: that text quotes what the merchant's receiver answered (a
// redirect's Location, its body) or what the transport said (a URL with
// its credentials), which is the merchant's business, not the customer's.
func TestExportDescribesDeliveryErrorsWithoutTheReceiversWords(t *testing.T) {
	secrets := []string{"tok_redirect_9f8e", "login.example.net", "stack_7c1d", "10.0.3.7", "hunter2", "admin:", "internal.example.net"}
	for _, c := range []struct {
		delivery webhook.Delivery
		shown    string
	}{
		{webhook.Delivery{Status: webhook.Pending, Attempts: 1, ResponseStatus: 302,
			Error: "HTTP 302: redirects are not followed (Location: https://login.example.net/sso?token=tok_redirect_9f8e)"},
			"the receiver answered HTTP 302, a redirect, which is not followed"},
		{webhook.Delivery{Status: webhook.Failed, Attempts: 9, ResponseStatus: 500,
			Error: `HTTP 500: {"error":"db down at 10.0.3.7","trace":"stack_7c1d"}`},
			"the receiver answered HTTP 500"},
		{webhook.Delivery{Status: webhook.Failed, Attempts: 9, ResponseStatus: 500,
			Error: `HTTP 500: stack_7c1d; then: the endpoint was disabled: delivery d1 failed for 72h0m0s (9 attempts); its last error: HTTP 500`},
			"the receiver answered HTTP 500"},
		{webhook.Delivery{Status: webhook.Pending, Attempts: 2,
			Error: `parse "https://admin:hunter2@internal.example.net/in": net/url: invalid control character in URL`},
			"no answer from the receiver: it could not be reached, or did not answer in time"},
		{webhook.Delivery{Status: webhook.Pending, Attempts: 3,
			Error: `net/http: HTTP/1.x transport connection broken: malformed HTTP response "stack_7c1d 10.0.3.7"`},
			"no answer from the receiver: it could not be reached, or did not answer in time"},
		{webhook.Delivery{Status: webhook.Pending, Attempts: 1, Error: "no answer within 10s (WEBHOOK_TIMEOUT)"},
			"no answer from the receiver: it could not be reached, or did not answer in time"},
		{webhook.Delivery{Status: webhook.Failed, Attempts: 1,
			Error: "refused: the receiver's address is a private address; deliveries to it are refused (WEBHOOK_ALLOW_PRIVATE)"},
			"no answer from the receiver: it could not be reached, or did not answer in time"},
		{webhook.Delivery{Status: webhook.Failed, Attempts: 0, Error: webhook.NotSent + "the endpoint is disabled"},
			"not sent to the receiver"},
		{webhook.Delivery{Status: webhook.Failed, Attempts: 4, Error: webhook.NotSent + "event e1 is not in the event store"},
			"not sent to the receiver"},
		{webhook.Delivery{Status: webhook.Failed, Attempts: 2, ResponseStatus: 400, Error: webhook.ErasedError},
			"the receiver answered HTTP 400"},
		// Erased: it may have been a "not sent" as well as a silence.
		{webhook.Delivery{Status: webhook.Failed, Attempts: 3, Error: webhook.ErasedError},
			"the attempt failed; what was recorded of it was erased with the customer's personal data"},
		{webhook.Delivery{Status: webhook.Succeeded, Attempts: 2, ResponseStatus: 204}, ""},
		{webhook.Delivery{Status: webhook.Pending}, ""},
	} {
		f := exportFake()
		d := &f.history.WebhookDeliveries[0].Delivery
		d.Status, d.Attempts, d.ResponseStatus, d.Error = c.delivery.Status, c.delivery.Attempts, c.delivery.ResponseStatus, c.delivery.Error
		x, err := ops.NewExports(f, f, 0)
		require.NoError(t, err)
		got, err := x.ExportCustomer(t.Context(), ops.ExportRequest{By: "key:k1", MerchantID: exportMerchant, CustomerID: exportCustomer})
		require.NoError(t, err)
		doc, err := json.Marshal(got.WebhookDeliveries)
		require.NoError(t, err)
		for _, s := range secrets {
			require.NotContains(t, string(doc), s, "the receiver's words of %q", c.delivery.Error)
		}
		require.Equal(t, c.shown, got.WebhookDeliveries[0].Error, c.delivery.Error)
		require.Equal(t, c.delivery.ResponseStatus, got.WebhookDeliveries[0].ResponseStatus, "the receiver's status stays")
	}
}
