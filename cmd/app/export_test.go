package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/readmodel"
	"hearth/app/access"
	"hearth/app/command"
	"hearth/app/ops"
	"hearth/app/query"
	"hearth/client"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
)

// exportFixture is a customer of merchant A with a marker in every field
// that holds their data: the record, a service request, an order assigned
// (a schedule), dispatched and settled, an order cancelled, and a service
// plan (its visits beyond the generator's horizon: no order of its own).
type exportFixture struct {
	customer string
	ids      []string // the customer's aggregates with personal data: request, orders, schedule
	plan     string   // their plan (no personal data of its own)
}

// mark is the marker of one field of the customer tagged tag.
func mark(field, tag string) string { return field + "-" + tag + "-mark" }

// exportMarkerFields are the fields that carry a marker.
var exportMarkerFields = []string{"name", "phone", "email", "address", "notes", "request-content", "request-notes",
	"order-notes", "dispatch-note", "settlement-note", "cancel-reason", "cancelled-order-notes"}

func (a *api) exportFixture(tag string, hour int) exportFixture {
	a.t.Helper()
	c := a.must(http.StatusCreated, http.MethodPost, "/v1/customers", a.opA, map[string]any{
		"name": mark("name", tag), "phone": mark("phone", tag), "email": mark("email", tag) + "@example.com",
		"address": mark("address", tag), "notes": mark("notes", tag)}).Body["id"].(string)
	f := exportFixture{customer: c}
	req := a.must(http.StatusCreated, http.MethodPost, "/v1/service-requests", a.opA, map[string]any{
		"customer_id": c, "content": mark("request-content", tag), "notes": mark("request-notes", tag), "source": "phone"})
	order := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
		"customer_id": c, "amount_cents": 5000, "notes": mark("order-notes", tag)}).Body["id"].(string)
	start := time.Date(2030, 1, 1, hour, 0, 0, 0, time.UTC)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": start.Format(time.RFC3339), "end_at": start.Add(time.Hour).Format(time.RFC3339),
		"dispatch_note": mark("dispatch-note", tag)})
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order+"/settlement", a.opA, map[string]any{
		"settlement_status": "settled", "paid_amount_cents": 5000, "settlement_note": mark("settlement-note", tag)})
	cancelled := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
		"customer_id": c, "amount_cents": 100, "notes": mark("cancelled-order-notes", tag)}).Body["id"].(string)
	a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+cancelled+"/cancel", a.opA, map[string]any{"reason": mark("cancel-reason", tag)})
	item := a.crmCreate(a.opA, "/v1/catalog-items", map[string]any{"name": "Clean " + tag, "base_price_cents": 4500})
	plan := a.must(http.StatusCreated, http.MethodPost, "/v1/plans", a.opA, map[string]any{
		"customer_id": c, "catalog_item_id": item, "window": map[string]any{"start": "09:00", "end": "10:00"},
		"recurrence": map[string]any{"frequency": "monthly", "interval": 1, "start": "2031-01-06", "count": 2}}).Body["id"].(string)
	f.ids = []string{req.Body["id"].(string), order, cancelled, a.liveSchedule(a.opA, order).Id.String()}
	f.plan = plan
	return f
}

// awaitProjectedAndDelivered waits until every event is in the change log
// and delivered to the one endpoint.
func (a *api) awaitProjectedAndDelivered() {
	a.t.Helper()
	require.Eventually(a.t, func() bool {
		var events, changes, delivered int
		ctx := a.t.Context()
		var subjects int // customer.erased and the like: delivered, with no read model
		if a.dbs.es.DB.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE stream_type = 'data_subject') FROM events`).Scan(&events, &subjects) != nil ||
			a.dbs.rm.DB.QueryRowContext(ctx, `SELECT count(*) FROM change_log`).Scan(&changes) != nil ||
			a.dbs.es.DB.QueryRowContext(ctx, `SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded'`).Scan(&delivered) != nil {
			return false
		}
		return changes == events-subjects && delivered == events
	}, 10*time.Second, 10*time.Millisecond, "every event projected and delivered")
}

// exportAudit are the audit log's customer export entries, newest first.
func (a *api) exportAudit() []ops.AuditEntry { return a.auditOf(ops.ActionCustomerExport) }

// auditOf are the audit log's entries of one action, newest first.
func (a *api) auditOf(action string) []ops.AuditEntry {
	a.t.Helper()
	entries, _, err := a.w.auditTrail.ListAudit(a.t.Context(), query.Page{Number: 1, Size: 100})
	require.NoError(a.t, err)
	var out []ops.AuditEntry
	for _, e := range entries {
		if e.Action == action {
			out = append(out, e)
		}
	}
	return out
}

// An operator exports everything held about one customer: every field of
// theirs is in the document, nothing of another customer is, the export is
// in the audit log without a value, and the CLI prints the same document.
func TestCustomerExport(t *testing.T) {
	t.Parallel()
	for name, newDB := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			urls := newDB(t)
			a := withWebhooks(t, urls, nil)
			rc := newReceiver(t)
			// A token in the path and the query: the export shows neither.
			endpoint, _ := a.createEndpoint(a.opA, rc.URL+"/hook/tok_live_123?key=s3cret")
			alpha, bravo := a.exportFixture("ALPHA", 9), a.exportFixture("BRAVO", 11)
			otherMerchants := a.createCustomer(a.opB, "Globex Customer")
			a.awaitProjectedAndDelivered()

			r, err := a.hearth().ExportCustomerWithResponse(t.Context(), uid(t, alpha.customer), nil, as(a.opA))
			expect(t, http.StatusOK, r, err)
			require.Equal(t, "no-store", r.HTTPResponse.Header.Get("Cache-Control"))
			doc := string(r.Body)
			for _, f := range exportMarkerFields {
				require.Contains(t, doc, mark(f, "ALPHA"), "customer A's %s", f)
			}
			require.NotContains(t, doc, "BRAVO", "nothing of customer B")
			for _, id := range append([]string{bravo.customer, bravo.plan}, bravo.ids...) {
				require.NotContains(t, doc, id, "nothing of customer B's")
			}

			x := r.JSON200
			require.EqualValues(t, "hearth.customer-export/1", x.Schema)
			require.Equal(t, a.merchantA, x.MerchantId.String())
			require.Equal(t, alpha.customer, x.Customer.Id.String())
			require.Equal(t, mark("address", "ALPHA"), x.Customer.Address)
			require.Len(t, x.ServiceRequests, 1)
			require.Len(t, x.Orders, 2)
			require.Len(t, x.Plans, 1)
			require.Equal(t, alpha.customer, x.Plans[0].CustomerId.String())
			require.Len(t, x.Schedules, 1)
			var ids []string
			for _, v := range x.ServiceRequests {
				ids = append(ids, v.Id.String())
			}
			for _, v := range x.Orders {
				ids = append(ids, v.Id.String())
			}
			for _, v := range x.Schedules {
				ids = append(ids, v.Id.String())
			}
			for _, v := range x.Plans {
				ids = append(ids, v.Id.String())
			}
			all := append([]string{alpha.plan}, alpha.ids...)
			require.ElementsMatch(t, all, ids)
			// Every event of those aggregates, each in the change log and
			// delivered to the endpoint with its public form as payload.
			var stored int
			for _, id := range all {
				stored += a.events(id)
			}
			require.Len(t, x.Events, stored)
			require.Len(t, x.ChangeLog, stored)
			require.Len(t, x.WebhookDeliveries, stored)
			events := map[string]bool{}
			for _, e := range x.Events {
				events[e.Id.String()] = true
			}
			for _, c := range x.ChangeLog {
				require.True(t, events[c.EventId.String()], "change %s of an exported event", c.EventId)
			}
			for _, d := range x.WebhookDeliveries {
				require.Equal(t, d.EventId, d.Payload.Id)
				require.True(t, events[d.EventId.String()])
				require.Equal(t, endpoint, d.EndpointId.String())
				require.Equal(t, rc.URL, d.Url, "the endpoint's scheme, host and port only")
				require.EqualValues(t, "succeeded", d.Status)
			}

			// Who exported which customer, and how many of each: no value.
			audit := a.exportAudit()
			require.Len(t, audit, 1)
			require.Equal(t, "key:"+a.opAKeyID, audit[0].Actor)
			require.Equal(t, "customer/"+alpha.customer, audit[0].Target)
			require.EqualValues(t, 2, audit[0].Details["orders"])
			require.EqualValues(t, 1, audit[0].Details["plans"])
			require.EqualValues(t, stored, audit[0].Details["events"])
			entry, err := json.Marshal(audit[0])
			require.NoError(t, err)
			require.NotContains(t, string(entry), "-mark")

			// Not found: unknown, another merchant's; forbidden: worker and
			// admin keys; a bad id. None is recorded.
			notFound := func(key, id string) {
				r, err := a.hearth().ExportCustomerWithResponse(t.Context(), uid(t, id), nil, as(key))
				problemOf(t, http.StatusNotFound, "/problems/not-found", r, err)
			}
			notFound(a.opA, uuid.New())
			notFound(a.opA, otherMerchants)
			notFound(a.opB, alpha.customer)
			for _, key := range []string{a.worker, a.admin} {
				r, err := a.hearth().ExportCustomerWithResponse(t.Context(), uid(t, alpha.customer), nil, as(key))
				problemOf(t, http.StatusForbidden, "/problems/forbidden", r, err)
			}
			requireProblem(t, a.do(http.MethodGet, "/v1/customers/nope/export", a.opA, nil), http.StatusBadRequest, "/problems/invalid-id")
			require.Len(t, a.exportAudit(), 1)

			// The CLI: the same document from the same use case, recorded
			// for --by.
			var stdout, stderr syncBuffer
			require.NoError(t, run(t.Context(), []string{"customers", "export", "--merchant", "acme", alpha.customer, "--by", "dpo@acme.example"},
				env(map[string]string{"DATABASE_URL": urls.EventStore, "READMODEL_DATABASE_URL": urls.ReadModel, "USER": "tester", "MASTER_KEY": testMasterKey}),
				&stdout, &stderr), "%s", stderr.String())
			var fromAPI, fromCLI map[string]any
			require.NoError(t, json.Unmarshal(r.Body, &fromAPI))
			require.NoError(t, json.Unmarshal([]byte(stdout.String()), &fromCLI))
			require.NotEmpty(t, fromCLI["exported_at"])
			delete(fromAPI, "exported_at")
			delete(fromCLI, "exported_at")
			require.Equal(t, fromAPI, fromCLI)
			audit = a.exportAudit()
			require.Len(t, audit, 2)
			require.Equal(t, "dpo@acme.example", audit[0].Actor)

			err = run(t.Context(), []string{"customers", "export", "--merchant", "acme", bravo.customer + "x"},
				env(map[string]string{"DATABASE_URL": urls.EventStore, "READMODEL_DATABASE_URL": urls.ReadModel, "USER": "tester", "MASTER_KEY": testMasterKey}),
				&stdout, &stderr)
			require.ErrorContains(t, err, "ID: must be a UUID")
			err = run(t.Context(), []string{"customers", "export", "--merchant", "globex", alpha.customer},
				env(map[string]string{"DATABASE_URL": urls.EventStore, "READMODEL_DATABASE_URL": urls.ReadModel, "USER": "tester", "MASTER_KEY": testMasterKey}),
				&stdout, &stderr)
			require.ErrorContains(t, err, `merchant "globex" has no customer`)
			require.Len(t, a.exportAudit(), 2)
		})
	}
}

// A customer with a thousand orders exports whole; past the cap, the export
// is refused (never cut short) and not recorded.
func TestCustomerExportLarge(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewSplitDBs(t))
	customer := a.createCustomer(a.opA, "Many Orders")
	const n = 1000
	var last string
	for range n {
		w, err := a.w.app.Commands.Orders.Create(t.Context(), command.CreateOrder{Meta: event.Meta{MerchantID: a.merchantA,
			Actor: "key:" + a.opAKeyID, CorrelationID: uuid.New(), OccurredAt: time.Now()}, CustomerID: customer, AmountCents: 100})
		require.NoError(t, err)
		last = w.Stream[0].StreamID
	}
	a.awaitOrderAt(a.opA, last, 1)
	require.Eventually(t, func() bool {
		var changes int
		return a.dbs.rm.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM change_log`).Scan(&changes) == nil && changes == n
	}, 10*time.Second, 10*time.Millisecond)

	r, err := a.hearth().ExportCustomerWithResponse(t.Context(), uid(t, customer), nil, as(a.opA))
	expect(t, http.StatusOK, r, err)
	require.Len(t, r.JSON200.Orders, n)
	require.Len(t, r.JSON200.Events, n)
	require.Len(t, r.JSON200.ChangeLog, n)

	// The cap, lowered to the list's size and one below.
	_, rm := a.dbs.api()
	rows, err := readmodel.NewCustomerRows(rm)
	require.NoError(t, err)
	for limit, tooLarge := range map[int]bool{n: false, n - 1: true} {
		x, err := ops.NewExports(rows, a.w.refdata, limit)
		require.NoError(t, err)
		got, err := x.ExportCustomer(t.Context(), ops.ExportRequest{By: "test", MerchantID: a.merchantA, CustomerID: customer})
		if !tooLarge {
			require.NoError(t, err)
			require.Len(t, got.Orders, n)
			continue
		}
		var rule *apperr.RuleError
		require.ErrorAs(t, err, &rule)
		require.Equal(t, ops.RuleExportTooLarge, rule.Rule)
		require.Contains(t, rule.Detail, fmt.Sprintf("more than %d orders", n-1))
	}
	require.Len(t, a.exportAudit(), 2, "the API's and the cap's own export; the refused one is not recorded")
}

// An order moved to another customer still holds what was written about
// the first one, in its events (sealed for them): the first customer's
// export has those events, opened, and their webhook deliveries, as the
// erasure would find them; it has nothing of the order as it is now, and
// nothing sealed for the other customer. The other customer's export
// opens only what is sealed for them.
func TestCustomerExportFollowsTheirDataToAnotherCustomersOrder(t *testing.T) {
	t.Parallel()
	a := withWebhooks(t, pgtest.NewDB(t), nil)
	rc := newReceiver(t)
	a.createEndpoint(a.opA, rc.URL+"/hook")
	alice, bob := a.createCustomer(a.opA, "Alice"), a.createCustomer(a.opA, "Bob")
	o := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
		"customer_id": alice, "amount_cents": 100, "notes": "ALICE-SECRET key under the mat"}).Body["id"].(string)
	a.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+o, a.opA, map[string]any{"customer_id": bob, "notes": "BOB-SECRET ring twice"})
	a.awaitOrder(a.opA, o, 2)
	a.awaitProjectedAndDelivered()

	export := func(customer string) map[string]any {
		return a.must(http.StatusOK, http.MethodGet, "/v1/customers/"+customer+"/export", a.opA, nil).Body
	}
	text := func(v any) string { return string(jsonOf(t, map[string]any{"v": v})) }
	x := export(alice)
	require.Empty(t, x["orders"], "the order is Bob's now")
	require.Len(t, x["events"], 1, "the event written about Alice")
	require.Contains(t, text(x["events"]), "ALICE-SECRET")
	require.NotContains(t, text(x), "BOB-SECRET")
	require.Len(t, x["webhook_deliveries"], 1)
	require.Contains(t, text(x["webhook_deliveries"]), "ALICE-SECRET")

	y := export(bob)
	require.Len(t, y["orders"], 1)
	require.Len(t, y["events"], 2)
	require.Contains(t, text(y["events"]), "BOB-SECRET")
	require.NotContains(t, text(y["events"]), "ALICE-SECRET", "sealed for Alice: not opened for Bob")
}

// An order moved to another customer holds the first customer's text in
// its earlier events and in its change log's earlier snapshots: the second
// customer's export shows none of it, whether those events are sealed for
// the first customer or were written in clear by the release before
// sealing (app protect not run yet), and names those fields withheld; it
// shows all of the second customer's own text. The first customer's export
// keeps their text from the events sealed for them.
func TestCustomerExportShowsNothingOfAnotherCustomerOnAMovedOrder(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	old := a.previousRelease()
	alice, bob := a.createCustomer(a.opA, "Alice"), a.createCustomer(a.opA, "Bob")
	clear := old.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
		"customer_id": alice, "amount_cents": 100, "notes": "ALICE-CLEAR"}).Body["id"].(string)
	old.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+clear, a.opA, map[string]any{"customer_id": bob, "notes": "BOB-CLEAR"})
	sealed := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
		"customer_id": alice, "amount_cents": 100, "notes": "ALICE-SEALED"}).Body["id"].(string)
	a.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+sealed, a.opA, map[string]any{"customer_id": bob, "notes": "BOB-SEALED"})
	require.Eventually(t, a.projected, 10*time.Second, 10*time.Millisecond)

	export := func(customer string) (map[string]any, string) {
		x := a.must(http.StatusOK, http.MethodGet, "/v1/customers/"+customer+"/export", a.opA, nil).Body
		return x, string(jsonOf(t, x))
	}
	y, text := export(bob)
	require.Len(t, y["orders"], 2)
	require.Contains(t, text, "BOB-CLEAR")
	require.Contains(t, text, "BOB-SEALED")
	require.NotContains(t, text, "ALICE-CLEAR", "written in clear about Alice: not shown to Bob")
	require.NotContains(t, text, "ALICE-SEALED", "sealed for Alice: not shown to Bob")
	// Alice's versions say that a field is left out, not that it was empty.
	created := 0
	for _, e := range y["events"].([]any) {
		e := e.(map[string]any)
		data := e["data"].(map[string]any)
		if e["type"] != "order.created" {
			require.NotContains(t, data, "withheld", "event %s is Bob's", e["type"])
			continue
		}
		created++
		require.Nil(t, data["notes"], "order %s", e["aggregate_id"])
		require.Equal(t, []any{"notes"}, data["withheld"], "order %s", e["aggregate_id"])
	}
	require.Equal(t, 2, created)
	withheld := 0
	for _, c := range y["change_log"].([]any) {
		c := c.(map[string]any)
		for _, side := range []string{"before", "after"} {
			s, ok := c[side].(map[string]any)
			if !ok || s["customer_id"] == bob {
				continue
			}
			withheld++
			require.Equal(t, "", s["notes"], "change %v of %s, %s", c["version"], c["aggregate_id"], side)
			require.Equal(t, []any{"notes", "dispatch_note", "cancellation_reason", "settlement_note"}, s["withheld"])
		}
	}
	require.Equal(t, 4, withheld, "each order's version 1, as after and as before of the move")
	for _, o := range y["orders"].([]any) {
		require.NotContains(t, o, "withheld", "Bob restated the notes on the move: nothing of Alice's left on the row")
	}

	x, text := export(alice)
	require.Empty(t, x["orders"], "both orders are Bob's now")
	require.Contains(t, text, "ALICE-SEALED", "sealed for Alice: hers wherever it is")
	require.NotContains(t, text, "BOB-")
}

// Moving an order takes its notes only when restated, but its dispatch
// note, its settlement note and its schedule's notes stay on the rows,
// written about the first customer: the second customer's export shows
// none of them, in the rows or in any snapshot of the change log (where
// they are named withheld), until the second customer writes their own.
func TestCustomerExportShowsNoOtherCustomersNotesCarriedOnAMovedOrder(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	alice, bob := a.createCustomer(a.opA, "Alice"), a.createCustomer(a.opA, "Bob")
	o := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
		"customer_id": alice, "amount_cents": 5000, "notes": "ALICE-NOTES"}).Body["id"].(string)
	start := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+o+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": start.Format(time.RFC3339), "end_at": start.Add(time.Hour).Format(time.RFC3339),
		"dispatch_note": "ALICE-DISPATCH"})
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+o+"/settlement", a.opA, map[string]any{
		"settlement_status": "settled", "paid_amount_cents": 5000, "settlement_note": "ALICE-SETTLEMENT"})
	a.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+o, a.opA, map[string]any{"customer_id": bob, "notes": "BOB-NOTES"})
	require.Eventually(t, a.projected, 10*time.Second, 10*time.Millisecond)

	// Through the generated client: every field answered, withheld among
	// them, is in the document's CustomerExport.
	r, err := a.hearth().ExportCustomerWithResponse(t.Context(), uid(t, bob), nil, as(a.opA))
	expect(t, http.StatusOK, r, err)
	var y map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &y))
	text := string(r.Body)
	require.Len(t, y["orders"], 1)
	require.Len(t, y["schedules"], 1)
	require.Contains(t, text, "BOB-NOTES")
	require.NotContains(t, text, "ALICE-", "nothing written about Alice")
	// The rows say which of their fields are left out, not empty: as the
	// change log's snapshot of their version does.
	row := y["orders"].([]any)[0].(map[string]any)
	require.Equal(t, "", row["dispatch_note"])
	require.Equal(t, []any{"dispatch_note", "settlement_note"}, row["withheld"], "the order's row")
	require.Equal(t, []any{"notes"}, y["schedules"].([]any)[0].(map[string]any)["withheld"], "the schedule's row")
	for _, path := range []string{"/v1/orders/" + o, "/v1/schedules/" + a.liveSchedule(a.opA, o).Id.String()} {
		require.NotContains(t, a.must(http.StatusOK, http.MethodGet, path, a.opA, nil).Body, "withheld",
			"%s: only the export withholds", path)
	}
	last := y["change_log"].([]any)
	for _, c := range last {
		c := c.(map[string]any)
		if c["aggregate_id"] != o || intOf(c["version"]) != intOf(y["orders"].([]any)[0].(map[string]any)["version"]) {
			continue
		}
		require.Equal(t, []any{"dispatch_note", "settlement_note"}, c["after"].(map[string]any)["withheld"],
			"the order as it is now: Bob's notes, Alice's dispatch and settlement notes withheld")
	}

	x := a.must(http.StatusOK, http.MethodGet, "/v1/customers/"+alice+"/export", a.opA, nil).Body
	text = string(jsonOf(t, x))
	for _, mark := range []string{"ALICE-NOTES", "ALICE-DISPATCH", "ALICE-SETTLEMENT"} {
		require.Contains(t, text, mark, "written about Alice: hers wherever it is")
	}
	require.NotContains(t, text, "BOB-")
}

// exportsWaitingForLocks polls until n backends of the read models'
// database wait for a lock (the exports a lock on plans holds) or answered
// holds an answer, and reports whether one came first. The read models have
// a database of their own: every backend waiting there is an export's.
func exportsWaitingForLocks[T any](t *testing.T, a *api, n int, answered chan T) bool {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if len(answered) > 0 {
			return true
		}
		var waiting int
		require.NoError(t, a.dbs.rm.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		if waiting >= n {
			return false
		}
		require.False(t, time.Now().After(deadline), "neither an answer nor %d exports waiting within 10 s", n)
		<-tick.C
	}
}

// An export is built whole in memory: exports running at once on an
// instance must be bounded, or one merchant asking for many (each up to
// MaxExportItems of every list) holds the instance's memory for every
// tenant. A merchant gets one export at a time per instance (429, limit
// exports), and the instance builds EXPORT_MAX_IN_FLIGHT (2) at once: a
// third merchant's waits for neither (503 too-many-exports), both with
// Retry-After; once one ends, the next export runs.
func TestConcurrentExportsAreBounded(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewSplitDBs(t))
	ctx := t.Context()
	_, merchantC, opC := func() (string, string, string) {
		k, err := a.w.refdata.CreateKey(ctx, "initech", access.Operator, "")
		require.NoError(t, err)
		return k.ID, k.MerchantID, k.Secret
	}()
	require.NotEqual(t, a.merchantA, merchantC)
	ca := a.createCustomer(a.opA, "Ada")
	cb := a.createCustomer(a.opB, "Bea")
	cc := a.createCustomer(opC, "Cyd")

	blocker, err := a.dbs.rm.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = blocker.Rollback() }()
	_, err = blocker.ExecContext(ctx, `LOCK TABLE plans IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	type exported struct {
		r   *client.ExportCustomerResponse
		err error
	}
	export := func(key, customer string) chan exported {
		done := make(chan exported, 1)
		go func() {
			r, err := a.hearth().ExportCustomerWithResponse(ctx, uid(t, customer), nil, as(key))
			done <- exported{r, err}
		}()
		return done
	}
	first := export(a.opA, ca)
	require.False(t, exportsWaitingForLocks(t, a, 1, first), "merchant A's export runs (and waits for plans)")

	second := export(a.opA, ca)
	require.True(t, exportsWaitingForLocks(t, a, 2, second), "a second export of merchant A is refused at once, not built beside its first")
	x := <-second
	p := problemOf(t, http.StatusTooManyRequests, "/problems/rate-limited", x.r, x.err)
	require.NotNil(t, p.Limit)
	require.Equal(t, "exports", string(*p.Limit))
	require.NotEmpty(t, x.r.HTTPResponse.Header.Get("Retry-After"))
	// Both refusals, of both exports, are answers the document describes.
	d := newDocCheck(t, a)
	require.Equal(t, http.StatusTooManyRequests, d.send("a merchant's second export", "GET", "/v1/customers/"+ca+"/export", a.opA, nil, nil).Status)
	require.Equal(t, http.StatusTooManyRequests, d.send("a merchant's export beside its customer's", "GET", "/v1/staff/"+a.staffA+"/export", a.opA, nil, nil).Status)

	other := export(a.opB, cb)
	require.False(t, exportsWaitingForLocks(t, a, 2, other), "merchant B's export runs beside A's")

	third := export(opC, cc)
	require.True(t, exportsWaitingForLocks(t, a, 3, third), "a third export on the instance is refused at once")
	x = <-third
	problemOf(t, http.StatusServiceUnavailable, "/problems/too-many-exports", x.r, x.err)
	require.NotEmpty(t, x.r.HTTPResponse.Header.Get("Retry-After"))
	require.Equal(t, http.StatusServiceUnavailable, d.send("an export on a full instance", "GET", "/v1/staff/"+a.staffA+"/export", opC, nil, nil).Status)
	require.Empty(t, d.violations)

	require.NoError(t, blocker.Rollback())
	for _, done := range []chan exported{first, other} {
		x := <-done
		expect(t, http.StatusOK, x.r, x.err)
	}
	// The slots are given back: the refused ones may run now.
	x = <-export(a.opA, ca)
	expect(t, http.StatusOK, x.r, x.err)
	x = <-export(opC, cc)
	expect(t, http.StatusOK, x.r, x.err)
	require.Len(t, a.exportAudit(), 4, "the four exports that ran; the refused ones are not recorded")
}
