package ops_test

import (
	"context"
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
