package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/projector"
	"hearth/adapters/readmodel"
	"hearth/adapters/vault"
	"hearth/app/command"
	"hearth/app/ops"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/internal/natstest"
	"hearth/internal/pgtest"
	"hearth/leader"
)

// runRelay runs the relay to NATS (a.cfg.RelayNATSURL) as its leader would.
func runRelay(t *testing.T, a *api) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	unit, err := newRelay(a.cfg, a.dbs, a.w, log)
	require.NoError(t, err)
	el, err := leader.New(leader.Config{ConnString: a.cfg.DatabaseURL, TermDB: a.dbs.rm.DB, Name: unit.Name,
		FenceAppName: unit.FenceAppName, Lease: leader.DefaultLease, Log: log})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx, unit.Lead) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// dumpDB is every row of every table of a database as text, bytea columns
// as their bytes (escaped only where not printable), so that a marker
// written anywhere shows.
func dumpDB(t *testing.T, db *sql.DB) string {
	t.Helper()
	ctx := t.Context()
	rows, err := db.QueryContext(ctx, `
		SELECT c.table_schema, c.table_name,
		       string_agg(CASE WHEN c.data_type = 'bytea' THEN format('encode(%I, ''escape'')', c.column_name)
		                       ELSE format('%I::text', c.column_name) END, ', ' ORDER BY c.ordinal_position)
		FROM information_schema.columns c JOIN information_schema.tables t USING (table_schema, table_name)
		WHERE t.table_type = 'BASE TABLE' AND c.table_schema NOT IN ('pg_catalog', 'information_schema')
		GROUP BY c.table_schema, c.table_name`)
	require.NoError(t, err)
	type table struct{ schema, name, columns string }
	var tables []table
	for rows.Next() {
		var tb table
		require.NoError(t, rows.Scan(&tb.schema, &tb.name, &tb.columns))
		tables = append(tables, tb)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, tables)
	var out strings.Builder
	for _, tb := range tables {
		var text sql.NullString
		q := fmt.Sprintf(`SELECT string_agg(concat_ws(' | ', %s), E'\n') FROM %q.%q`, tb.columns, tb.schema, tb.name)
		require.NoError(t, db.QueryRowContext(ctx, q).Scan(&text), q)
		fmt.Fprintf(&out, "== %s.%s\n%s\n", tb.schema, tb.name, text.String)
	}
	return out.String()
}

// dumpDir is every file under dir, read as bytes.
func dumpDir(t *testing.T, dir string) string {
	t.Helper()
	var out strings.Builder
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		out.Write(b)
		return err
	}))
	return out.String()
}

// readModelRows are the rows of the read-model tables, as text, by table.
func readModelRows(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, table := range []string{"orders", "service_requests", "schedules"} {
		var text sql.NullString
		require.NoError(t, db.QueryRowContext(t.Context(),
			`SELECT string_agg(t::text, E'\n' ORDER BY t.id) FROM `+table+` t`).Scan(&text))
		out[table] = text.String
	}
	return out
}

// An erased customer leaves no trace Hearth controls: a distinct marker in
// every personal field of two customers (the record, a service request,
// orders dispatched, settled and cancelled, a schedule, idempotent
// answers), with a webhook endpoint and the relay on; after the erasure of
// one, no marker of theirs is in any table of either database, in the
// JetStream store on disk, in the delivery log or in any API answer, while
// every marker of the other is still where it was; verify passes, and a
// rebuild gives the same read models.
func TestErasureForgetsEveryCopy(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewSplitDBs(t)
	nsrv := natstest.Start(t)
	a := withWebhooks(t, urls, func(cfg *Config) {
		cfg.RelayNATSURL, cfg.RelayStream, cfg.RelaySubjectPrefix, cfg.RelayDuplicateWindow = nsrv.URL(), "CRM", "hearth", time.Minute
	})
	runRelay(t, a)
	rc := newReceiver(t)
	endpoint, _ := a.createEndpoint(a.opA, rc.URL+"/hook")

	alpha, bravo := a.exportFixture("ALPHA", 9), a.exportFixture("BRAVO", 11)
	// Stored answers of idempotent writes that carry a customer's data.
	for _, tag := range []string{"ALPHA", "BRAVO"} {
		customer := map[string]string{"ALPHA": alpha.customer, "BRAVO": bravo.customer}[tag]
		r := a.sendOK(http.MethodPost, "/v1/orders", withKey(a.opA, "idem-"+tag), map[string]any{
			"customer_id": customer, "amount_cents": 700, "notes": mark("idempotent-notes", tag)})
		require.Equal(t, http.StatusCreated, r.Status, r.String())
	}
	fields := append([]string{"idempotent-notes"}, exportMarkerFields...)
	a.awaitProjectedAndDelivered()
	nc, err := nats.Connect(nsrv.URL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := nc.JetStream()
	require.NoError(t, err)
	var events int
	require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT count(*) FROM events`).Scan(&events))
	require.Eventually(t, func() bool {
		info, err := js.StreamInfo("CRM")
		return err == nil && info.State.Msgs == uint64(events)
	}, 30*time.Second, 10*time.Millisecond, "every event relayed")

	// The other customer's rows, byte for byte, before and after.
	bravoRows := func() string {
		ids := append([]string{bravo.customer}, bravo.ids...)
		var es, rm sql.NullString
		require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT string_agg(t::text, E'\n' ORDER BY t::text) FROM (
			SELECT e::text AS t FROM events e WHERE e.stream_id::text = ANY ($1)
			UNION ALL SELECT c::text FROM customers c WHERE c.id::text = ANY ($1)
			UNION ALL SELECT k::text FROM data_keys k WHERE k.subject_id::text = ANY ($1)) x`, ids).Scan(&es))
		require.NoError(t, a.dbs.rm.DB.QueryRow(`SELECT string_agg(t, E'\n' ORDER BY t) FROM (
			SELECT o::text AS t FROM orders o WHERE o.id::text = ANY ($1)
			UNION ALL SELECT r::text FROM service_requests r WHERE r.id::text = ANY ($1)
			UNION ALL SELECT s::text FROM schedules s WHERE s.id::text = ANY ($1)
			UNION ALL SELECT c::text FROM change_log c WHERE c.aggregate_id::text = ANY ($1)) x`, ids).Scan(&rm))
		require.NotEmpty(t, es.String)
		require.NotEmpty(t, rm.String)
		return es.String + "\n" + rm.String
	}
	bravoBefore := bravoRows()

	// Bad input changes nothing: no confirmation, a wrong one, an unknown
	// customer, another merchant's, a worker's key.
	erase := "/v1/customers/" + alpha.customer + "/erase"
	requireProblem(t, a.do(http.MethodPost, erase, a.opA, map[string]any{}), http.StatusUnprocessableEntity, "/problems/validation-failed")
	requireProblem(t, a.do(http.MethodPost, erase, a.opA, map[string]any{"confirm": bravo.customer}), http.StatusUnprocessableEntity, "/problems/validation-failed")
	unknown := uuid.New()
	requireProblem(t, a.do(http.MethodPost, "/v1/customers/"+unknown+"/erase", a.opA, map[string]any{"confirm": unknown}), http.StatusNotFound, "/problems/not-found")
	requireProblem(t, a.do(http.MethodPost, erase, a.opB, map[string]any{"confirm": alpha.customer}), http.StatusNotFound, "/problems/not-found")
	requireProblem(t, a.do(http.MethodPost, erase, a.worker, map[string]any{"confirm": alpha.customer}), http.StatusForbidden, "/problems/forbidden")
	require.Contains(t, a.must(http.StatusOK, http.MethodGet, "/v1/customers/"+alpha.customer, a.opA, nil).Raw, mark("name", "ALPHA"))

	erased := a.must(http.StatusOK, http.MethodPost, erase, a.opA, map[string]any{"confirm": alpha.customer})
	require.Equal(t, alpha.customer, erased.Body["id"])
	require.EqualValues(t, len(alpha.ids)+1, erased.Body["aggregates"], "the request, both orders, the schedule and the idempotent order")
	// Read your erasure: each aggregate answers with its fields erased.
	pos := positionOf(erased.Body)
	for _, id := range alpha.ids[1:3] {
		o := a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+id+"?min_position="+pos, a.opA, nil)
		require.Nil(t, o.Body["notes"], o.String())
		require.NotEmpty(t, o.Body["erased"], o.String())
	}
	// Erasing again answers the same, and marks nothing more.
	again := a.must(http.StatusOK, http.MethodPost, erase, a.opA, map[string]any{"confirm": alpha.customer})
	require.Equal(t, erased.Body["erased_at"], again.Body["erased_at"])
	require.EqualValues(t, 0, again.Body["aggregates"])
	a.awaitProjectedAndDelivered()
	require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT count(*) FROM events`).Scan(&events))
	require.Eventually(t, func() bool {
		info, err := js.StreamInfo("CRM")
		return err == nil && info.State.Msgs == uint64(events)
	}, 30*time.Second, 10*time.Millisecond, "every event relayed, the erasures too")

	// Receivers hear of it: the webhook endpoint and the stream get
	// customer.erased, and each aggregate's personal_data_erased.
	var publicErased, aggregatesErased int
	for _, d := range rc.delivered() {
		switch {
		case d.event.Type == "customer.erased" && d.event.AggregateID == alpha.customer:
			publicErased++
		case strings.HasSuffix(d.event.Type, ".personal_data_erased"):
			aggregatesErased++
		}
	}
	require.Equal(t, 1, publicErased, "one customer.erased delivered")
	require.Equal(t, len(alpha.ids)+1, aggregatesErased)
	msg, err := js.GetLastMsg("CRM", "hearth.*.customer.erased")
	require.NoError(t, err)
	require.Contains(t, string(msg.Data), alpha.customer)

	// Every API answer that could hold them.
	var answers strings.Builder
	get := func(path string) {
		answers.WriteString(a.must(http.StatusOK, http.MethodGet, path, a.opA, nil).Raw)
	}
	for _, list := range []string{"/v1/customers", "/v1/orders", "/v1/service-requests", "/v1/schedules",
		"/v1/webhook-endpoints/" + endpoint + "/deliveries"} {
		get(list + "?page_size=200")
	}
	get("/v1/events?limit=1000")
	for _, c := range []string{alpha.customer, bravo.customer} {
		get("/v1/customers/" + c)
		get("/v1/customers/" + c + "/export")
	}
	for _, f := range []exportFixture{alpha, bravo} { // request, two orders, schedule
		get("/v1/service-requests/" + f.ids[0])
		for _, order := range f.ids[1:3] {
			get("/v1/orders/" + order)
			get("/v1/orders/" + order + "/changes")
		}
		get("/v1/schedules/" + f.ids[3])
	}
	dumps := map[string]string{
		"the event store": dumpDB(t, a.dbs.es.DB), "the read model": dumpDB(t, a.dbs.rm.DB),
		"the JetStream store": dumpDir(t, nsrv.Dir()), "API answers": answers.String(),
	}
	everywhere := dumps["the event store"] + dumps["the read model"] + dumps["API answers"]
	for _, f := range fields {
		for where, text := range dumps {
			require.NotContains(t, text, mark(f, "ALPHA"), "customer A's %s in %s", f, where)
		}
		// The relay never carries personal data (docs/personal-data.md):
		// the other customer's markers are everywhere else.
		require.Contains(t, everywhere, mark(f, "BRAVO"), "customer B's %s", f)
	}
	require.Contains(t, dumps["API answers"], mark("order-notes", "BRAVO"))

	require.Equal(t, bravoBefore, bravoRows(), "nothing of the other customer changed")

	// The audit log names who erased whom, never a value.
	entries, _, err := a.w.auditTrail.ListAudit(t.Context(), query.Page{Number: 1, Size: 100})
	require.NoError(t, err)
	var audited int
	for _, e := range entries {
		if e.Action == ops.ActionCustomerErase {
			audited++
			require.Equal(t, "key:"+a.opAKeyID, e.Actor)
			require.Equal(t, "customer/"+alpha.customer, e.Target)
		}
	}
	require.Positive(t, audited)

	// Verify passes, and a rebuild gives the same rows.
	out, err := cli(t.Context(), a.urls(), "verify", "--recheck", "0")
	require.NoError(t, err, out)
	before := readModelRows(t, a.dbs.rm.DB)
	for _, p := range []string{"orders", "service_requests", "schedules"} {
		out, err := cli(t.Context(), a.urls(), "rebuild", p)
		require.NoError(t, err, out)
	}
	require.Equal(t, before, readModelRows(t, a.dbs.rm.DB), "a rebuild brings nothing back")
}

// A staff member is erased from the CLI as from the API: the record keeps
// its id and no personal data, takes no change, is no longer active, and
// staff_member.erased goes out; the CLI refuses an erasure without the
// confirmation and names an unknown id. An erased customer's record takes
// no change either, and no new personal data is written about them.
func TestErasureOfStaffAndRecords(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	a := withWebhooks(t, urls, nil)
	rc := newReceiver(t)
	a.createEndpoint(a.opA, rc.URL+"/hook")
	staff := a.must(http.StatusCreated, http.MethodPost, "/v1/staff", a.opA, map[string]any{
		"name": "Sam STAFFMARK", "phone": "07700 900123"}).Body["id"].(string)
	a.must(http.StatusOK, http.MethodPut, "/v1/staff/"+staff+"/working-hours", a.opA, map[string]any{
		"week":       map[string]any{"monday": []any{map[string]any{"start": "09:00", "end": "17:00"}}},
		"exceptions": []any{map[string]any{"date": "2030-03-04", "reason": "sick_day"}}})

	vars := map[string]string{"DATABASE_URL": urls.EventStore, "MASTER_KEY": testMasterKey, "USER": "tester"}
	var out syncBuffer
	err := run(t.Context(), []string{"staff", "erase", "--merchant", "acme", staff}, env(vars), &out, io.Discard)
	require.ErrorContains(t, err, "--confirm: must repeat the id")
	unknown := uuid.New()
	err = run(t.Context(), []string{"staff", "erase", "--merchant", "acme", unknown, "--confirm", unknown}, env(vars), &out, io.Discard)
	require.ErrorContains(t, err, `merchant "acme" has no staff member `+unknown)
	require.Contains(t, a.must(http.StatusOK, http.MethodGet, "/v1/staff/"+staff, a.opA, nil).Raw, "STAFFMARK")

	require.NoError(t, run(t.Context(), []string{"staff", "erase", "--merchant", "acme", staff, "--confirm", staff, "--by", "dpo@acme.example"},
		env(vars), &out, io.Discard))
	require.Contains(t, out.String(), "erased staff member "+staff)
	require.Contains(t, out.String(), "second pass done: the erasure is complete")
	s := a.must(http.StatusOK, http.MethodGet, "/v1/staff/"+staff, a.opA, nil)
	require.NotContains(t, s.Raw, "STAFFMARK")
	require.NotContains(t, s.Raw, "07700")
	require.NotEmpty(t, s.Body["erased_at"])
	require.Equal(t, false, s.Body["active"])
	hours := a.must(http.StatusOK, http.MethodGet, "/v1/staff/"+staff+"/working-hours", a.opA, nil)
	require.NotContains(t, hours.Raw, "sick_day", "the days off sick go with the rest")
	require.NotContains(t, hours.Raw, "09:00")
	requireProblem(t, a.do(http.MethodPut, "/v1/staff/"+staff+"/working-hours", a.opA, map[string]any{
		"exceptions": []any{map[string]any{"date": "2030-03-05", "reason": "sick_day"}}}), http.StatusConflict, "/problems/conflict")
	require.NotContains(t, a.must(http.StatusOK, http.MethodGet, "/v1/staff/"+staff+"/working-hours", a.opA, nil).Raw, "sick_day",
		"none come back")
	requireProblem(t, a.do(http.MethodPatch, "/v1/staff/"+staff, a.opA, map[string]any{"name": "Sam again"}), http.StatusConflict, "/problems/conflict")
	require.Eventually(t, func() bool {
		for _, d := range rc.delivered() {
			if d.event.Type == "staff_member.erased" && d.event.AggregateID == staff {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "staff_member.erased delivered")
	var actor string
	require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT actor FROM admin_audit WHERE action = 'staff_member.erase' AND target = $1`,
		"staff_member/"+staff).Scan(&actor))
	require.Equal(t, "dpo@acme.example", actor)

	// An erased customer: no change to the record, no new personal data
	// about them (an order's notes are personal), and their id stays valid;
	// their open order can still be closed (TestAnErasedCustomersOrderCanBeCancelled).
	customer := a.createCustomer(a.opA, "Ada Erased")
	order := a.createOrder(a.opA, customer, 1500)
	a.must(http.StatusOK, http.MethodPost, "/v1/customers/"+customer+"/erase", a.opA, map[string]any{"confirm": customer})
	requireProblem(t, a.do(http.MethodPatch, "/v1/customers/"+customer, a.opA, map[string]any{"name": "Ada"}), http.StatusConflict, "/problems/conflict")
	requireProblem(t, a.do(http.MethodPost, "/v1/orders", a.opA, map[string]any{"customer_id": customer, "amount_cents": 100, "notes": "x"}),
		http.StatusConflict, "/problems/conflict")
	a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+order+"/status", a.opA, map[string]any{"status": "dispatching"})
}

// An erased customer's open order can be cancelled, its live schedule with
// it: the customer's name and address are gone, nobody can make the visit,
// and an order that cannot be closed stays open on the merchant's lists
// and holds its staff member's time for ever. A cancellation needs a reason,
// which is personal text; written for an erased customer it is sealed under
// a key never stored, so it reads as erased at once and nothing of it is
// kept. Text about them in any other write stays refused
// (TestAnErasedCustomersBookingCanBeFreedAndPaid).
func TestAnErasedCustomersOrderCanBeCancelled(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	c := a.createCustomer(a.opA, "Ada")
	o := a.createOrder(a.opA, c, 1000)
	window := map[string]any{"staff_id": a.staffA, "start_at": "2031-01-01T10:00:00Z", "end_at": "2031-01-01T11:00:00Z"}
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+o+"/assignment", a.opA, window)
	a.must(http.StatusOK, http.MethodPost, "/v1/customers/"+c+"/erase", a.opA, map[string]any{"confirm": c})

	r := a.do(http.MethodPost, "/v1/orders/"+o+"/cancel", a.opA, map[string]any{"reason": "moved to Lisbon, per Ada"})
	require.Equal(t, http.StatusOK, r.Status, "cancelling an erased customer's order: %s", r)
	got := a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+o+"?min_position="+positionOf(r.Body), a.opA, nil)
	require.Equal(t, "cancelled", got.Body["status"], "%s", got)
	require.Nil(t, got.Body["cancellation_reason"], "the reason reads as erased: %s", got)
	require.NotContains(t, got.String(), "Lisbon")
	other := a.createOrder(a.opA, a.createCustomer(a.opA, "Bob"), 1000)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+other+"/assignment", a.opA, window) // the booking was freed

	var clear, unsealed int
	require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT count(*) FILTER (WHERE data::text LIKE '%Lisbon%'),
		count(*) FILTER (WHERE subject_id IS DISTINCT FROM $2) FROM events WHERE stream_id = $1 AND type = 'OrderCancelled'`, o, c).Scan(&clear, &unsealed))
	require.Zero(t, clear, "the reason is nowhere in clear")
	require.Zero(t, unsealed, "sealed for the customer, as their other events")
}

// A writer that still holds the customer's key (another instance, before
// its cache expires) cannot seal a new order once the erasure has passed:
// the write meets the subject's lock and finds the customer erased, so it
// writes nothing (409) and a later pass finds nothing to mark.
func TestAWriteAfterTheErasureIsRefusedWithAKeyStillCached(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	a := setup(t, urls)
	customer := a.createCustomer(a.opA, "Ada")
	first := a.createOrder(a.opA, customer, 1000)

	// The stale writer: its own vault and store, the key adopted before.
	stale, orders, _ := a.writeInstance()
	var sealedKey []byte
	require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT sealed FROM data_keys WHERE subject_id = $1`, customer).Scan(&sealedKey))
	require.NoError(t, stale.Adopt(customer, sealedKey))

	// The eraser runs on another instance (its own vault).
	_, _, eraser := a.writeInstance()
	req := ops.ErasureRequest{By: "test", MerchantID: a.merchantA, SubjectType: event.SubjectCustomer, SubjectID: customer, Confirm: customer}
	audit := func(ops.Erasure) ops.AuditEntry {
		return ops.AuditEntry{Actor: "test", Action: ops.ActionCustomerErase, Target: "customer/" + customer}
	}
	pass, err := eraser.EraseSubject(t.Context(), req, audit)
	require.NoError(t, err)
	require.Equal(t, 1, pass.Streams)

	before := a.events("")
	_, err = orders.Create(t.Context(), command.CreateOrder{
		Meta:       event.Meta{MerchantID: a.merchantA, Actor: "key:stale", CorrelationID: "c", OccurredAt: time.Now()},
		CustomerID: customer, AmountCents: 700, Notes: "written by a stale instance"})
	var conflict *apperr.ConflictError
	require.ErrorAs(t, err, &conflict, "the stale writer's key no longer seals")
	require.Equal(t, before, a.events(""), "and it wrote nothing")

	second, err := eraser.EraseSubject(t.Context(), req, audit)
	require.NoError(t, err)
	require.Zero(t, second.Streams, "a later pass finds nothing left")
	o := a.must(http.StatusOK, http.MethodGet, fmt.Sprintf("/v1/orders/%s?min_position=%d", first, pass.Position), a.opA, nil)
	require.Nil(t, o.Body["notes"], "order %s erased: %s", first, o.String())
}

// A data key missing for a customer who was not erased (a restore that
// lost data_keys, a hand-made deletion) stops a rebuild with a message that
// says so, never an empty field. (Projections park the aggregate:
// adapters/pubsub/projector TestMissingDataKeyParksTheAggregate.)
func TestMissingDataKeyStopsRebuild(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	a := setup(t, urls)
	customer := a.createCustomer(a.opA, "Ada")
	order := a.createOrder(a.opA, customer, 1000)
	a.awaitOrder(a.opA, order, 1)
	_, err := a.dbs.es.DB.Exec(`DELETE FROM data_keys WHERE subject_id = $1`, customer)
	require.NoError(t, err)

	// A rebuild reads the events with no key in any cache.
	out, err := cli(t.Context(), a.urls(), "rebuild", "orders")
	require.Error(t, err, out)
	require.ErrorContains(t, err, "the data key of subject "+customer+" is missing, and the subject was not erased")
	a.awaitOrder(a.opA, order, 1) // the live read model is left as it was
}

// An aggregate whose projection holds it before an event this release
// cannot read (here a newer release's type after the order's first event:
// the live projection parks it there, at version 1) does not stop a
// rebuild of the projection: the rebuild folds that stream up to the event,
// as the live row stands, and rebuilds every other row, every merchant's.
// It stopped the whole rebuild until an operator skipped the event.
func TestRebuildGoesOnPastAnEventItCannotRead(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	held := a.createOrder(a.opA, a.createCustomer(a.opA, "Ada"), 100)
	other := a.createOrder(a.opB, a.createCustomer(a.opB, "Gus"), 200)
	a.awaitOrder(a.opA, held, 1)
	a.awaitOrder(a.opB, other, 1)
	_, err := a.dbs.es.DB.ExecContext(t.Context(), `
		INSERT INTO events (event_id, stream_type, stream_id, version, merchant_id, type, data, occurred_at, correlation_id, actor)
		SELECT gen_random_uuid(), stream_type, stream_id, 2, merchant_id, 'OrderTeleported', '{"to":"Mars"}', occurred_at, correlation_id, actor
		FROM events WHERE stream_id = $1`, held)
	require.NoError(t, err)
	// A row the rebuild must put right.
	_, err = a.dbs.rm.DB.ExecContext(t.Context(), `UPDATE orders SET amount_cents = 1 WHERE id = $1`, other)
	require.NoError(t, err)

	out, err := cli(t.Context(), a.urls(), "rebuild", "orders")
	require.NoError(t, err, out)
	r := a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+other, a.opB, nil)
	require.EqualValues(t, 200, r.Body["amount_cents"], "rebuilt")
	r = a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+held, a.opA, nil)
	require.EqualValues(t, 1, r.Body["version"], "held before the event, as the live projection holds it")
	require.EqualValues(t, 100, r.Body["amount_cents"])
}

// A rebuild, and verify, read an erased customer's fields as erased in
// every stream that holds their PersonalDataErased, as the live projection
// does, even in a process that still holds the customer's data key in
// memory (it opened it, folding another of their orders, moments before
// the erasure deleted it): a rebuild that folded such a stream with the
// key would swap the notes back into the live table, at the version the
// change log records, where nothing would ever fold them away again.
func TestRebuildAndVerifyKeepAnErasedCustomerErasedWhileTheKeyIsCached(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	c := a.createCustomer(a.opA, "Ada")
	order := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
		"customer_id": c, "amount_cents": 100, "notes": "CACHED-SECRET notes"}).Body["id"].(string)
	a.awaitOrder(a.opA, order, 1)
	var sealed []byte
	require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT sealed FROM data_keys WHERE subject_id = $1`, c).Scan(&sealed))

	erased := a.must(http.StatusOK, http.MethodPost, "/v1/customers/"+c+"/erase", a.opA, map[string]any{"confirm": c})
	require.Equal(t, "done", erased.Body["second_pass"])
	row := a.awaitOrder(a.opA, order, 2)
	require.Nil(t, row.Body["notes"], "the live projection erased the notes: %s", row)

	// The rebuild's and verify's process opened the key before the erasure.
	stale, err := vault.New(a.dbs.es.DB, a.cfg.MasterKeys)
	require.NoError(t, err)
	require.NoError(t, stale.Adopt(c, sealed))

	report, err := readmodel.Verify(t.Context(), readmodel.VerifyConfig{Log: a.w.eventLog, Decoders: stale, DB: a.dbs.rm,
		Verification: ops.Verification{Projections: []string{"orders"}}})
	require.NoError(t, err)
	assert.Empty(t, report.Projections[0].Differences, "the read model agrees with the events as erased")

	_, err = readmodel.Rebuild(t.Context(), readmodel.RebuildConfig{Log: a.w.eventLog, Decoders: stale, DB: a.dbs.rm, Projection: "orders"})
	require.NoError(t, err)
	row = a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+order, a.opA, nil)
	require.Nil(t, row.Body["notes"], "the rebuild brought the notes back: %s", row)
	require.NotContains(t, row.Raw, "SECRET")
	require.True(t, stale.Cached(c), "the test ran within the key's time in memory, as the rebuild did")
}

// A rebuild that caught up with an order parked in the orders projection
// before its customer was erased, and swaps after the erasure reached the
// live row (at the version it had: ForgetParked), swaps in a row that
// shows the customer's notes no more than the live one did; the version
// alone, which the erasure of a parked row does not move, cannot tell the
// rebuild that its shadow row is out of date.
//
// Not parallel: the failing handler retries inside its subscriber's
// transaction (architecture.md).
func TestRebuildKeepsAParkedAggregateErasedDuringIt(t *testing.T) {
	var poisoned atomic.Value // the id of the order whose version 2 fails
	poisoned.Store("")
	a := setupWith(t, pgtest.NewDB(t), func(_ *Config, ps []projector.Projection) {
		for i := range ps {
			if ps[i].Name != "orders" {
				continue
			}
			apply, batch := ps[i].Apply, ps[i].ApplyBatch
			fails := func(r event.Recorded) error {
				if r.StreamID == poisoned.Load().(string) && r.Version == 2 {
					return errors.New("test: version 2 of this order does not apply")
				}
				return nil
			}
			ps[i].Apply = func(ctx context.Context, r event.Recorded) error {
				if err := fails(r); err != nil {
					return err
				}
				return apply(ctx, r)
			}
			ps[i].ApplyBatch = func(ctx context.Context, recs []event.Recorded, also func(context.Context, bun.Tx) error) error {
				for _, r := range recs {
					if err := fails(r); err != nil {
						return err
					}
				}
				return batch(ctx, recs, also)
			}
		}
	})
	c := a.createCustomer(a.opA, "Ada")
	order := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
		"customer_id": c, "amount_cents": 100, "notes": "PARKED-SECRET notes"}).Body["id"].(string)
	a.awaitOrder(a.opA, order, 1)
	poisoned.Store(order)
	a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+order+"/status", a.opA, map[string]any{"status": "confirmed"})
	require.Eventually(t, func() bool {
		r, err := a.send(http.MethodGet, "/admin/parked", auth(a.admin), nil)
		return err == nil && r.Status == http.StatusOK && intOf(r.Body["total"]) == 1
	}, 20*time.Second, 10*time.Millisecond)

	// The rebuild folds and catches up while the customer's key opens; the
	// erasure comes as it is about to swap.
	swapping := false
	_, err := readmodel.Rebuild(t.Context(), readmodel.RebuildConfig{Log: a.w.eventLog, Decoders: a.w.vault, DB: a.dbs.rm, Projection: "orders",
		Progress: func(p ops.RebuildProgress) {
			if p.Phase != "swap" || swapping {
				return
			}
			swapping = true
			a.must(http.StatusOK, http.MethodPost, "/v1/customers/"+c+"/erase", a.opA, map[string]any{"confirm": c})
			require.Eventually(t, func() bool {
				r := a.do(http.MethodGet, "/v1/orders/"+order, a.opA, nil)
				return r.Status == http.StatusOK && r.Body["notes"] == nil
			}, 20*time.Second, 10*time.Millisecond, "the erasure reaches the parked order's row")
		}})
	require.NoError(t, err)
	require.True(t, swapping)
	row := a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+order, a.opA, nil)
	require.EqualValues(t, 1, row.Body["version"], "the row stays at the version it reached: %s", row)
	require.Nil(t, row.Body["notes"], "the rebuild brought the notes back: %s", row)
	require.NotContains(t, row.Raw, "SECRET")
}

// An erasure reaches an order whose events wait behind a parked one: its
// row and change log forget the customer's text at once, at the version
// they reached (the events waiting still apply in order), rather than show
// it until an operator replays the order; the replay then applies the
// erasure as any other event.
//
// Not parallel: the failing handler retries inside its subscriber's
// transaction (architecture.md).
func TestErasureReachesAParkedAggregate(t *testing.T) {
	a := setup(t, pgtest.NewDB(t))
	c := a.createCustomer(a.opA, "Ada")
	order := func(notes string) string {
		return a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
			"customer_id": c, "amount_cents": 100, "notes": notes}).Body["id"].(string)
	}
	parked, flowing := order("PARKED-SECRET notes"), order("FLOWING-SECRET notes")
	a.awaitOrder(a.opA, parked, 1)
	a.awaitOrder(a.opA, flowing, 1)
	_, err := a.dbs.rm.DB.Exec(fmt.Sprintf(`ALTER TABLE orders ADD CONSTRAINT test_cause CHECK (id <> '%s' OR status = 'pending')`, parked))
	require.NoError(t, err)
	a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+parked+"/status", a.opA, map[string]any{"status": "confirmed"})
	require.Eventually(t, func() bool {
		r, err := a.send(http.MethodGet, "/admin/parked", auth(a.admin), nil)
		return err == nil && r.Status == http.StatusOK && intOf(r.Body["total"]) == 1
	}, 20*time.Second, 10*time.Millisecond)

	erased := a.must(http.StatusOK, http.MethodPost, "/v1/customers/"+c+"/erase", a.opA, map[string]any{"confirm": c})
	require.EqualValues(t, 2, erased.Body["aggregates"])
	require.Equal(t, "done", erased.Body["second_pass"], "the erasure is complete")
	for _, id := range []string{flowing, parked} {
		require.Eventually(t, func() bool {
			r := a.do(http.MethodGet, "/v1/orders/"+id, a.opA, nil)
			return r.Status == http.StatusOK && r.Body["notes"] == nil
		}, 20*time.Second, 10*time.Millisecond, "order %s", id)
	}
	row := a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+parked, a.opA, nil)
	require.EqualValues(t, 1, row.Body["version"], "the row stays where it was: the events behind the parked one wait")
	require.Equal(t, "pending", row.Body["status"])
	for _, path := range []string{"/v1/orders/" + parked + "/changes", "/v1/orders?page_size=200", "/v1/customers/" + c + "/export"} {
		require.NotContains(t, a.must(http.StatusOK, http.MethodGet, path, a.opA, nil).Raw, "SECRET", path)
	}

	// Once the cause is gone, the replay applies what waited, in order.
	_, err = a.dbs.rm.DB.Exec(`ALTER TABLE orders DROP CONSTRAINT test_cause`)
	require.NoError(t, err)
	a.must(http.StatusOK, http.MethodPost, "/admin/parked/orders/"+parked+"/replay", a.admin, nil)
	a.awaitOrder(a.opA, parked, 3)
	row = a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+parked, a.opA, nil)
	require.Equal(t, "confirmed", row.Body["status"])
	require.Nil(t, row.Body["notes"])
	require.Contains(t, row.Body["erased"], "notes")
}

// A write that created the customer's data key before the erasure and
// commits after the erasure began (here its events' insert waits on a lock,
// longer than the erasure's wait between its passes): the erasure waits
// for it (the subject's lock), then deletes the key, marks the write's
// stream and deletes its stored answer; a retry with the same
// Idempotency-Key runs the write again, and it is refused, replaying
// nothing of the customer.
func TestErasureWaitsForAWriteInFlight(t *testing.T) {
	t.Parallel()
	a := setupConfigured(t, pgtest.NewDB(t), func(cfg *Config) { cfg.RequestStatementTimeout = time.Minute }, nil)
	ctx := t.Context()
	customer := a.createCustomer(a.opA, "Ada")

	// Any lock wait of the write, once it runs its statements: an insert
	// into events waits for a lock the test holds.
	release := a.holdIn(`BEFORE INSERT ON events FOR EACH STATEMENT`)
	waiting := a.lockWaiting

	idem := withKey(a.opA, "late-order-1")
	body := map[string]any{"customer_id": customer, "amount_cents": 100, "notes": "LATE-SECRET gate code 4711"}
	created := a.sendAsync(http.MethodPost, "/v1/orders", idem, body)
	require.Eventually(t, waiting("INSERT INTO events%"), 20*time.Second, 10*time.Millisecond, "the order's insert waits")
	erased := a.sendAsync(http.MethodPost, "/v1/customers/"+customer+"/erase", auth(a.opA), map[string]any{"confirm": customer})
	require.Eventually(t, waiting("%pg_advisory_xact_lock(hearth_subject_lock%"), 20*time.Second, 10*time.Millisecond,
		"the erasure waits for the order")
	release()
	r := <-created
	require.Equal(t, http.StatusCreated, r.Status, "%s", r)
	r = <-erased
	require.Equal(t, http.StatusOK, r.Status, "%s", r)
	require.EqualValues(t, 1, r.Body["aggregates"], "the order written meanwhile is marked")

	var keys, unmarked int
	require.NoError(t, a.dbs.es.DB.QueryRowContext(ctx, `SELECT count(*) FROM data_keys WHERE subject_id = $1`, customer).Scan(&keys))
	require.NoError(t, a.dbs.es.DB.QueryRowContext(ctx, `SELECT count(*) FROM events e WHERE e.subject_id = $1
		AND NOT EXISTS (SELECT 1 FROM events x WHERE x.stream_id = e.stream_id AND x.type = 'PersonalDataErased' AND x.position > e.position)`,
		customer).Scan(&unmarked))
	require.Zero(t, keys, "the customer's data key is deleted")
	require.Zero(t, unmarked, "every stream sealed for the customer is marked erased")
	retry, err := a.send(http.MethodPost, "/v1/orders", idem, body)
	require.NoError(t, err)
	requireProblem(t, retry, http.StatusConflict, "/problems/conflict")
	require.NotContains(t, retry.Raw, "LATE-SECRET")
}

// echoReceiver is a webhook receiver that refuses order.created with 422,
// quoting the notes it was sent (as a validating receiver does); the first
// such request waits until release is called. Every other delivery is 200.
type echoReceiver struct {
	*httptest.Server
	arrived chan struct{} // closed when the first order.created has arrived
	release func()
}

func newEchoReceiver(t *testing.T) *echoReceiver {
	t.Helper()
	hold := make(chan struct{})
	rc := &echoReceiver{arrived: make(chan struct{}), release: sync.OnceFunc(func() { close(hold) })}
	var first sync.Once
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var e struct {
			Type string `json:"type"`
			Data struct {
				Notes *string `json:"notes"`
			} `json:"data"`
		}
		_ = json.Unmarshal(body, &e)
		if e.Type != "order.created" {
			w.WriteHeader(http.StatusOK)
			return
		}
		first.Do(func() {
			close(rc.arrived)
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		})
		notes := "<null>"
		if e.Data.Notes != nil {
			notes = *e.Data.Notes
		}
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = fmt.Fprintf(w, "invalid notes: %q", notes)
	}))
	t.Cleanup(rc.release)
	t.Cleanup(rc.Close)
	return rc
}

// A webhook attempt in flight while a customer is erased: its body was
// built before the erasure (the notes in it), and the receiver's answer,
// which quotes them, comes after the erasure replaced the errors of the
// customer's deliveries by "(erased)". It is recorded as "(erased)" too:
// the receiver's words are in neither the delivery log nor the export.
func TestErasureScrubsAWebhookAttemptInFlight(t *testing.T) {
	t.Parallel()
	a := withWebhooks(t, pgtest.NewDB(t), func(cfg *Config) {
		hourlyRetries(cfg)               // the refused attempt stays the last one
		cfg.WebhookTimeout = time.Minute // the held attempt outlasts the erasure
	})
	rc := newEchoReceiver(t)
	endpoint, _ := a.createEndpoint(a.opA, rc.URL+"/hook")
	customer := a.createCustomer(a.opA, "Ada")
	order := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
		"customer_id": customer, "amount_cents": 100, "notes": "INFLIGHT-SECRET gate code 4711"}).Body["id"].(string)

	select {
	case <-rc.arrived: // the attempt is in flight, its body built
	case <-time.After(30 * time.Second):
		t.Fatal("order.created never reached the receiver")
	}
	erased := a.must(http.StatusOK, http.MethodPost, "/v1/customers/"+customer+"/erase", a.opA, map[string]any{"confirm": customer})
	require.EqualValues(t, 1, erased.Body["aggregates"])
	rc.release() // the receiver answers now, quoting what it was sent

	var deliveries response
	require.Eventually(t, func() bool {
		r, err := a.send(http.MethodGet, "/v1/webhook-endpoints/"+endpoint+"/deliveries?page_size=200", auth(a.opA), nil)
		if err != nil || r.Status != http.StatusOK {
			return false
		}
		for _, it := range r.Body["items"].([]any) {
			d := it.(map[string]any)
			if d["aggregate_id"] == order && d["event_type"] == "order.created" && d["error"] != nil && d["error"] != "" {
				deliveries = r
				return true
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "the attempt in flight recorded")

	export := a.must(http.StatusOK, http.MethodGet, "/v1/customers/"+customer+"/export", a.opA, nil)
	var stored string
	require.NoError(t, a.dbs.es.DB.QueryRowContext(context.Background(),
		`SELECT string_agg(error, ' | ') FROM webhook_deliveries WHERE aggregate_id = $1`, order).Scan(&stored))
	require.NotContains(t, deliveries.Raw, "INFLIGHT-SECRET", "the delivery log after the erasure")
	require.NotContains(t, export.Raw, "INFLIGHT-SECRET", "the export after the erasure")
	require.NotContains(t, stored, "INFLIGHT-SECRET", "webhook_deliveries.error")
}

// An erasure that meets a concurrent write to one of the customer's
// streams (here a status change, no personal data: allowed after the
// erasure too) takes the version the erasure meant to append at; the
// erasure states no version and each pass is all or nothing, so it runs
// the pass again and answers 200, not 409.
func TestErasureRetriesPastAConcurrentWriteToAStream(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	customer := a.createCustomer(a.opA, "Ada")
	order := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
		"customer_id": customer, "amount_cents": 100, "notes": "gate code"}).Body["id"].(string)

	lock, err := a.dbs.es.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback() }()
	_, err = lock.ExecContext(ctx, `LOCK TABLE watermill_orders IN SHARE MODE`)
	require.NoError(t, err)
	changed := a.sendAsync(http.MethodPost, "/v1/orders/"+order+"/status", auth(a.opA), map[string]any{"status": "confirmed"})
	waiting := func(n int) func() bool {
		return func() bool {
			var got int
			err := a.dbs.es.DB.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&got)
			return err == nil && got == n
		}
	}
	require.Eventually(t, waiting(1), 20*time.Second, 10*time.Millisecond, "the status change holds version 2 of the order")
	erased := a.sendAsync(http.MethodPost, "/v1/customers/"+customer+"/erase", auth(a.opA), map[string]any{"confirm": customer})
	require.Eventually(t, waiting(2), 20*time.Second, 10*time.Millisecond, "the erasure waits for it")
	require.NoError(t, lock.Rollback())
	require.Equal(t, http.StatusOK, (<-changed).Status)
	r := <-erased
	require.Equal(t, http.StatusOK, r.Status, "the erasure answered %s", r)
}

// A customer erased after the upgrade but before app protect
// (operations.md, "Upgrading to sealed personal data"): the erasure finds
// none of their old events (subject_id null), so it marks no stream and
// replaces no receiver's error text; app protect then seals those events
// under a throwaway key and marks their aggregates erased, and replaces
// the receivers' words quoting them, as an erasure does.
func TestProtectAfterAnErasureScrubsDeliveryErrors(t *testing.T) {
	t.Parallel()
	a := withWebhooks(t, pgtest.NewDB(t), hourlyRetries)
	rc := newEchoReceiver(t)
	rc.release() // answers at once
	endpoint, _ := a.createEndpoint(a.opA, rc.URL+"/hook")
	old := a.previousRelease()
	customer := a.createCustomer(a.opA, "Ada")
	order := old.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
		"customer_id": customer, "amount_cents": 100, "notes": "LEGACY-SECRET gate code 4711"}).Body["id"].(string)
	require.Eventually(t, func() bool {
		var n int
		err := a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM webhook_deliveries
			WHERE aggregate_id = $1 AND error LIKE '%LEGACY-SECRET%'`, order).Scan(&n)
		return err == nil && n == 1
	}, 30*time.Second, 20*time.Millisecond, "the receiver refused order.created, quoting its notes")

	out, err := cli(t.Context(), a.urls(), "customers", "erase", "--merchant", "acme", customer, "--confirm", customer)
	require.NoError(t, err, out)
	out, err = cli(t.Context(), a.urls(), "protect")
	require.NoError(t, err, out)
	require.Contains(t, out, "(1 aggregates marked erased)")
	require.Eventually(t, a.projected, 10*time.Second, 10*time.Millisecond)
	o := a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+order, a.opA, nil)
	require.Nil(t, o.Body["notes"], "protect made the order read as erased: %s", o)

	deliveries := a.must(http.StatusOK, http.MethodGet, "/v1/webhook-endpoints/"+endpoint+"/deliveries?page_size=200", a.opA, nil)
	export := a.must(http.StatusOK, http.MethodGet, "/v1/customers/"+customer+"/export", a.opA, nil)
	assert.NotContains(t, deliveries.Raw, "LEGACY-SECRET", "the delivery log after erasure and protect")
	assert.NotContains(t, export.Raw, "LEGACY-SECRET", "the export after erasure and protect")
}

// A write on an instance that does not cache the customer's data key reads
// it with vault.KeySQL (INSERT ... ON CONFLICT DO UPDATE), which locks the
// data_keys row until the write commits; the erasure takes the subject's
// lock alone, then deletes that row. The write takes the subject's lock
// before the row, in the same order, so one waits for the other, never
// each for the other (Postgres would abort one of them as a deadlock).
// Here Bob's order given to Ada, whose key the writer has not cached (it
// opened only Bob's to load the order); a create's customer check takes
// the lock first anyway.
//
// The trigger only widens the window inside the write's KeySQL statement,
// after the row is locked (a round trip and the use case's work in
// production).
func TestErasureAndAWriteWithoutTheKeyCachedDoNotDeadlock(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	customer := a.createCustomer(a.opA, "Ada")
	a.createOrder(a.opA, customer, 1000) // the customer's data key exists
	order := a.createOrder(a.opA, a.createCustomer(a.opA, "Bob"), 1000)

	// The writer: another instance, which has not cached the key.
	_, orders, _ := a.writeInstance()
	// The eraser: yet another instance.
	_, _, eraser := a.writeInstance()

	release := a.holdIn(`BEFORE UPDATE ON data_keys FOR EACH ROW`)
	waiting := a.lockWaiting

	written := make(chan error, 1)
	go func() {
		notes := "gate code"
		_, err := orders.UpdateDetails(ctx, command.UpdateOrderDetails{OrderTarget: command.OrderTarget{
			Meta:    event.Meta{MerchantID: a.merchantA, Actor: "key:w", CorrelationID: "c", OccurredAt: time.Now()},
			OrderID: order}, CustomerID: &customer, Notes: &notes})
		written <- err
	}()
	require.Eventually(t, waiting("%INSERT INTO data_keys%"), 20*time.Second, 10*time.Millisecond,
		"the write holds the data key's row")

	req := ops.ErasureRequest{By: "test", MerchantID: a.merchantA, SubjectType: event.SubjectCustomer, SubjectID: customer, Confirm: customer}
	audit := func(ops.Erasure) ops.AuditEntry {
		return ops.AuditEntry{Actor: "test", Action: ops.ActionCustomerErase, Target: "customer/" + customer}
	}
	erased := make(chan error, 1)
	go func() {
		_, err := eraser.EraseSubject(ctx, req, audit)
		erased <- err
	}()
	// The erasure waits for the write: for the subject's lock (or, with the
	// locks taken in the other order, holding it, for the data key's row).
	require.Eventually(t, func() bool {
		return waiting("%DELETE FROM data_keys%")() || waiting("%pg_advisory_xact_lock(hearth_subject_lock%")()
	}, 20*time.Second, 10*time.Millisecond, "the erasure waits for the write")
	release()

	werr, eerr := <-written, <-erased
	isDeadlock := func(err error) bool {
		var pgErr *pgconn.PgError
		return errors.As(err, &pgErr) && pgErr.Code == "40P01"
	}
	require.False(t, isDeadlock(werr), "the write died in a deadlock: %v", werr)
	require.False(t, isDeadlock(eerr), "the erasure died in a deadlock: %v", eerr)
	require.NoError(t, eerr, "the erasure")
	if werr != nil {
		var conflict *apperr.ConflictError
		require.ErrorAs(t, werr, &conflict, "the write is refused as erased, if at all")
	}
}

// holdIn makes the statements that fire a trigger `when` (such as "BEFORE
// INSERT ON events FOR EACH STATEMENT") wait, once they run, until release:
// a lock wait of a write, where the test wants it.
func (a *api) holdIn(when string) (release func()) {
	a.t.Helper()
	ctx := a.t.Context()
	_, err := a.dbs.es.DB.ExecContext(ctx, `
		CREATE FUNCTION test_hold() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NEW; END $$;
		CREATE TRIGGER test_hold `+when+` EXECUTE FUNCTION test_hold()`)
	require.NoError(a.t, err)
	hold, err := a.dbs.es.DB.Conn(ctx)
	require.NoError(a.t, err)
	a.t.Cleanup(func() { _ = hold.Close() })
	_, err = hold.ExecContext(ctx, `SELECT pg_advisory_lock(4242)`)
	require.NoError(a.t, err)
	return func() {
		_, err := hold.ExecContext(ctx, `SELECT pg_advisory_unlock(4242)`)
		require.NoError(a.t, err)
	}
}

// lockWaiting returns whether one session of the test's database waits for
// a lock in a statement like query (a LIKE pattern).
func (a *api) lockWaiting(query string) func() bool {
	return func() bool {
		var n int
		err := a.dbs.es.DB.QueryRowContext(a.t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE $1 AND datname = current_database()`, query).Scan(&n)
		return err == nil && n == 1
	}
}

// writeInstance is another Hearth instance's write side on the test's event
// store: its own vault (its own key cache), its order commands and its
// store (which erases).
func (a *api) writeInstance() (*vault.Vault, command.OrderHandlers, *pubsub.Store) {
	a.t.Helper()
	v, err := vault.New(a.dbs.es.DB, a.cfg.MasterKeys)
	require.NoError(a.t, err)
	store, err := pubsub.NewStore(a.dbs.es, nil, v)
	require.NoError(a.t, err)
	tx, err := pubsub.NewTransactor(store)
	require.NoError(a.t, err)
	orders, err := command.NewOrderHandlers(tx)
	require.NoError(a.t, err)
	return v, orders, store
}

// sendAsync sends a request in the background; its answer (or the error
// as one) comes on the channel.
func (a *api) sendAsync(method, path string, header http.Header, body any) <-chan response {
	out := make(chan response, 1)
	go func() {
		r, err := a.send(method, path, header, body)
		if err != nil {
			r = response{Raw: err.Error()}
		}
		out <- r
	}()
	return out
}

// An order's notes are sealed for its customer: moved to another customer
// without restated notes, the text written about the first would be sealed
// for the second and outlive the first's erasure. The move is refused
// until the client states the notes (keeping them is then its decision),
// and a move that drops them leaves nothing of the first customer once
// they are erased.
func TestMovingAnOrderToAnotherCustomerNeedsItsNotesStated(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	alice, bob := a.createCustomer(a.opA, "Alice"), a.createCustomer(a.opA, "Bob")
	o := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
		"customer_id": alice, "amount_cents": 100, "notes": "ALICE-SECRET key under the mat"}).Body["id"].(string)

	refused := a.do(http.MethodPatch, "/v1/orders/"+o, a.opA, map[string]any{"customer_id": bob})
	requireProblem(t, refused, http.StatusUnprocessableEntity, "/problems/validation-failed")
	require.Equal(t, []string{"notes"}, problemFields(refused))

	moved := a.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+o, a.opA, map[string]any{"customer_id": bob, "notes": ""})
	require.Equal(t, bob, moved.Body["customer_id"])
	erased := a.must(http.StatusOK, http.MethodPost, "/v1/customers/"+alice+"/erase", a.opA, map[string]any{"confirm": alice})
	got := a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+o+"?min_position="+positionOf(erased.Body), a.opA, nil)
	require.Equal(t, bob, got.Body["customer_id"])
	require.NotContains(t, got.Raw, "ALICE-SECRET")
	require.NotContains(t, a.must(http.StatusOK, http.MethodGet, "/v1/customers/"+bob+"/export", a.opA, nil).Raw, "ALICE-SECRET")
}

// A name given where the id goes (erase "Ada Lovelace") is refused without
// being repeated: the erasure's and the export's command lines must not
// print the person's name, which may end in a CI job's log.
func TestEraseAndExportCommandsNeverRepeatANameGivenForAnID(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"customers", "erase", "--merchant", "acme", "Ada Lovelace", "--confirm", "Ada Lovelace"},
		{"staff", "erase", "--merchant", "acme", "Ada Lovelace", "--confirm", "Ada Lovelace"},
		{"customers", "export", "--merchant", "acme", "Ada Lovelace"},
	} {
		var stdout, stderr syncBuffer
		err := run(t.Context(), args, env(map[string]string{"DATABASE_URL": testDatabaseURL}), &stdout, &stderr)
		require.ErrorAs(t, err, new(usageError))
		require.ErrorContains(t, err, "ID: must be a UUID")
		require.NotContains(t, err.Error()+stdout.String()+stderr.String(), "Lovelace", "%q", args)
	}
}

// An erased customer's booked visit can still be called off: cancelling its
// schedule writes nothing about the customer (the order loses its staff
// member and has no dispatch note), so it frees the staff member's time and
// returns the order to confirmed, as for any customer; and a payment for
// their order is still recorded. Otherwise the staff member stays booked for
// a visit nobody will make, and the only way to free the time is to record
// work that was never done. What would write text about them, or start new
// work for them, stays refused: a conversion of their request.
func TestAnErasedCustomersBookingCanBeFreedAndPaid(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	c := a.createCustomer(a.opA, "Ada")
	o := a.createOrder(a.opA, c, 1000)
	window := map[string]any{"staff_id": a.staffA, "start_at": "2031-01-01T10:00:00Z", "end_at": "2031-01-01T11:00:00Z"}
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+o+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": window["start_at"], "end_at": window["end_at"], "dispatch_note": "ring twice"})
	sch := a.liveSchedule(a.opA, o).Id.String()
	req := a.must(http.StatusCreated, http.MethodPost, "/v1/service-requests", a.opA, map[string]any{
		"customer_id": c, "content": "fix the boiler"}).Body["id"].(string)
	a.must(http.StatusOK, http.MethodPost, "/v1/service-requests/"+req+"/status", a.opA, map[string]any{"status": "confirmed"})
	a.must(http.StatusOK, http.MethodPost, "/v1/customers/"+c+"/erase", a.opA, map[string]any{"confirm": c})

	cancelled := a.do(http.MethodPost, "/v1/schedules/"+sch+"/status", a.opA, map[string]any{"status": "cancelled"})
	require.Equal(t, http.StatusOK, cancelled.Status, "cancelling an erased customer's schedule: %s", cancelled)
	got := a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+o+"?min_position="+positionOf(cancelled.Body), a.opA, nil)
	require.Equal(t, "confirmed", got.Body["status"], "%s", got)
	require.Nil(t, got.Body["staff_id"], "%s", got)
	other := a.createOrder(a.opA, a.createCustomer(a.opA, "Bob"), 1000)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+other+"/assignment", a.opA, window)

	paid := a.do(http.MethodPut, "/v1/orders/"+o+"/settlement", a.opA, map[string]any{
		"settlement_status": "settled", "paid_amount_cents": 1000, "payment_method": "card"})
	require.Equal(t, http.StatusOK, paid.Status, "recording an erased customer's payment: %s", paid)

	requireProblem(t, a.do(http.MethodPost, "/v1/service-requests/"+req+"/convert", a.opA, nil), http.StatusConflict, "/problems/conflict")
	requireProblem(t, a.do(http.MethodPut, "/v1/orders/"+o+"/settlement", a.opA, map[string]any{
		"settlement_status": "settled", "paid_amount_cents": 1000, "settlement_note": "paid by Ada's neighbour"}),
		http.StatusConflict, "/problems/conflict")

	// What was written is sealed for the customer like every event of
	// theirs, so erasure and app protect treat it as theirs.
	var unsealed int
	require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT count(*) FROM events WHERE stream_id = $1
		AND type IN ('OrderAssignmentUpdated', 'OrderSettlementUpdated') AND subject_id IS DISTINCT FROM $2`, o, c).Scan(&unsealed))
	require.Zero(t, unsealed)
}

// A command that changes nothing succeeds, an erased customer's request
// included: its content reads as erased (empty), and an empty PATCH, or
// one restating what it has, must not be refused for a required content
// the client did not touch. A PATCH that writes text about them is 409.
func TestAnErasedCustomersRequestTakesAPatchThatChangesNothing(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	c := a.createCustomer(a.opA, "Ada")
	req := a.must(http.StatusCreated, http.MethodPost, "/v1/service-requests", a.opA, map[string]any{
		"customer_id": c, "content": "fix the boiler", "appointment_start_at": "2031-01-01T10:00:00Z"}).Body["id"].(string)
	a.must(http.StatusOK, http.MethodPost, "/v1/customers/"+c+"/erase", a.opA, map[string]any{"confirm": c})
	before := a.events(req)

	for _, body := range []map[string]any{{}, {"appointment_start_at": "2031-01-01T10:00:00Z"}} {
		r := a.do(http.MethodPatch, "/v1/service-requests/"+req, a.opA, body)
		require.Equal(t, http.StatusOK, r.Status, "a PATCH that changes nothing (%v): %s", body, r)
		require.Equal(t, before, a.events(req))
	}
	requireProblem(t, a.do(http.MethodPatch, "/v1/service-requests/"+req, a.opA, map[string]any{"content": "again"}),
		http.StatusConflict, "/problems/conflict")
}
