package main

import (
	"database/sql"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/app/command"
	"hearth/app/ops"
	"hearth/app/query"
	"hearth/internal/aggregates"
	"hearth/internal/pgtest"
)

// previousRelease is the API as the release before sealed personal data
// served it: its commands write through a store with no vault, so events
// keep their personal fields in clear (in events and in the topic tables)
// with subject_id null. (The migrations cannot stop before 015; the
// schedules' customer_id, which that release did not record, is taken out
// by the test.)
func (a *api) previousRelease() *api {
	t := a.t
	t.Helper()
	store, err := pubsub.NewStore(a.dbs.es, nil, nil)
	require.NoError(t, err)
	tx, err := pubsub.NewTransactor(store)
	require.NoError(t, err)
	w := a.w
	w.app.Commands.Orders, err = command.NewOrderHandlers(tx)
	require.NoError(t, err)
	w.app.Commands.ServiceRequests, err = command.NewServiceRequestHandlers(tx)
	require.NoError(t, err)
	w.app.Commands.Schedules, err = command.NewScheduleHandlers(tx)
	require.NoError(t, err)
	srv := serveAPI(t, a.cfg, a.dbs, w, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	old := *a
	old.base, old.client = srv.URL, srv.Client()
	return &old
}

// eventCopies are the tables that hold events' data (the events and every
// copy of their envelopes) and the data keys, as text, by table.
func eventCopies(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, table := range []string{"events", "watermill_orders", "watermill_service_requests", "watermill_schedules",
		"watermill_poison", "parked_events", "data_keys"} {
		var text sql.NullString
		require.NoError(t, db.QueryRowContext(t.Context(),
			`SELECT string_agg(t::text, E'\n') FROM `+table+` t`).Scan(&text))
		out[table] = text.String
	}
	return out
}

// eventMarkerFields are the fields of exportMarkerFields that events carry
// (the others are the customer's record).
var eventMarkerFields = []string{"request-content", "request-notes", "order-notes", "dispatch-note", "settlement-note",
	"cancel-reason", "cancelled-order-notes"}

// projected reports whether every event of an aggregate has its change-log
// row (the data subjects' own events have no read model).
func (a *api) projected() bool {
	var events, changes int
	if a.dbs.es.DB.QueryRow(`SELECT count(*) FROM events WHERE stream_type <> 'data_subject'`).Scan(&events) != nil ||
		a.dbs.rm.DB.QueryRow(`SELECT count(*) FROM change_log`).Scan(&changes) != nil {
		return false
	}
	return events == changes
}

// clearCopies counts, by table, the copies of events with personal fields
// whose data is not sealed.
func clearCopies(t *testing.T, db *sql.DB) map[string]int {
	t.Helper()
	var types []string
	for _, f := range aggregates.All() {
		for typ := range f.Personal {
			types = append(types, typ)
		}
	}
	out := map[string]int{}
	for table, q := range map[string]string{
		"watermill_orders":           `SELECT count(*) FROM watermill_orders WHERE metadata->>'type' = ANY ($1) AND NOT payload::jsonb->'data' ? 'sealed'`,
		"watermill_service_requests": `SELECT count(*) FROM watermill_service_requests WHERE metadata->>'type' = ANY ($1) AND NOT payload::jsonb->'data' ? 'sealed'`,
		"watermill_schedules":        `SELECT count(*) FROM watermill_schedules WHERE metadata->>'type' = ANY ($1) AND NOT payload::jsonb->'data' ? 'sealed'`,
		"watermill_poison":           `SELECT count(*) FROM watermill_poison WHERE metadata->>'type' = ANY ($1) AND NOT payload::jsonb->'data' ? 'sealed'`,
		"parked_events":              `SELECT count(*) FROM parked_events WHERE type = ANY ($1) AND NOT envelope->'data' ? 'sealed'`,
	} {
		var n int
		require.NoError(t, db.QueryRowContext(t.Context(), q, types).Scan(&n))
		out[table] = n
	}
	return out
}

type personalEvent struct {
	id, streamType, streamID, typ, subject string
	data                                   []byte
}

// personalEvents are the stored events whose type has personal fields, by
// event id.
func personalEvents(t *testing.T, db *sql.DB) map[string]personalEvent {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT event_id::text, stream_type, stream_id::text, type,
		coalesce(subject_id::text, ''), data FROM events ORDER BY position`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]personalEvent{}
	for rows.Next() {
		var e personalEvent
		require.NoError(t, rows.Scan(&e.id, &e.streamType, &e.streamID, &e.typ, &e.subject, &e.data))
		if f, ok := aggregates.ByType(e.streamType); ok && len(f.Personal[e.typ]) > 0 {
			out[e.id] = e
		}
	}
	require.NoError(t, rows.Err())
	return out
}

// An operator upgrading from the release that wrote personal fields in
// clear runs app protect once: afterwards no marker is left in clear in
// events, the topic tables, the poison queue or parked events; every event
// opens through the vault to what it held, names its customer in
// subject_id (a schedule that did not record its customer gets its
// order's); the events of a customer erased before protect read as erased
// and the read models forget them; verify passes and a rebuild gives the
// same read models; a second run changes nothing; and erasing a customer
// afterwards reaches their old events. A run stopped after one batch is
// finished by the next.
func TestProtectSealsEventsOfThePreviousRelease(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewSplitDBs(t)
	a := setup(t, urls)
	ctx := t.Context()
	es := a.dbs.es.DB
	old := a.previousRelease()
	tags := []string{"ALPHA", "BRAVO", "CHARLIE"}
	fixtures := map[string]exportFixture{}
	customerOf := map[string]string{} // by stream id
	for i, tag := range tags {
		f := old.exportFixture(tag, 9+2*i)
		fixtures[tag] = f
		for _, id := range f.ids {
			customerOf[id] = f.customer
		}
	}
	// An order moved from BRAVO to CHARLIE: its events before the move
	// are BRAVO's, the move's CHARLIE's.
	moved := old.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
		"customer_id": fixtures["BRAVO"].customer, "amount_cents": 300, "notes": mark("moved-notes", "BRAVO")}).Body["id"].(string)
	old.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+moved, a.opA, map[string]any{
		"customer_id": fixtures["CHARLIE"].customer, "notes": mark("moved-notes", "CHARLIE")})
	// And one moved from CHARLIE to DELTA, both erased before protect.
	delta := a.createCustomer(a.opA, "Delta")
	movedTwice := old.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
		"customer_id": fixtures["CHARLIE"].customer, "amount_cents": 300, "notes": mark("moved-notes", "CHARLIE")}).Body["id"].(string)
	old.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+movedTwice, a.opA, map[string]any{
		"customer_id": delta, "notes": mark("moved-notes", "DELTA")})
	subjectOf := func(e personalEvent) string {
		switch {
		case e.streamID == moved && e.typ == "OrderCreated":
			return fixtures["BRAVO"].customer
		case e.streamID == moved:
			return fixtures["CHARLIE"].customer
		case e.streamID == movedTwice && e.typ == "OrderCreated":
			return fixtures["CHARLIE"].customer
		case e.streamID == movedTwice:
			return delta
		}
		return customerOf[e.streamID]
	}
	// The previous release recorded no customer in ScheduleCreated.
	_, err := es.ExecContext(ctx, `UPDATE events SET data = data - 'customer_id' WHERE type = 'ScheduleCreated'`)
	require.NoError(t, err)
	_, err = es.ExecContext(ctx, `UPDATE watermill_schedules SET payload = jsonb_set(payload::jsonb, '{data}',
		(payload::jsonb -> 'data') - 'customer_id')::json WHERE metadata->>'type' = 'ScheduleCreated'`)
	require.NoError(t, err)
	// An order of ALPHA's poisoned for a projection and parked, as the
	// parking middleware keeps them.
	alphaOrder := fixtures["ALPHA"].ids[1]
	_, err = es.ExecContext(ctx, `INSERT INTO watermill_poison (uuid, payload, metadata, transaction_id)
		SELECT uuid, payload, metadata, pg_current_xact_id() FROM watermill_orders WHERE payload->>'stream_id' = $1`, alphaOrder)
	require.NoError(t, err)
	_, err = es.ExecContext(ctx, `INSERT INTO parked_events (projection, stream_id, version, event_id, type, envelope)
		SELECT 'protect_test', stream_id, version, event_id, type, jsonb_build_object('event_id', event_id, 'type', type,
		       'stream_type', stream_type, 'stream_id', stream_id, 'version', version, 'merchant_id', merchant_id,
		       'occurred_at', occurred_at, 'correlation_id', correlation_id, 'actor', actor, 'data', data)
		FROM events WHERE stream_id = $1`, alphaOrder)
	require.NoError(t, err)
	require.Eventually(t, a.projected, 10*time.Second, 10*time.Millisecond)

	before := eventCopies(t, es)
	for _, tag := range tags {
		for _, f := range eventMarkerFields {
			require.Contains(t, before["events"], mark(f, tag), "the previous release wrote %s of %s in clear", f, tag)
		}
	}
	for table, n := range clearCopies(t, es) {
		require.Positive(t, n, "%s holds copies in clear", table)
	}
	clear := personalEvents(t, es)
	require.NotEmpty(t, clear)
	for _, e := range clear {
		require.Empty(t, e.subject, "subject_id null before protect")
		require.NotContains(t, string(e.data), `"sealed"`)
		if e.typ == "ScheduleCreated" {
			require.NotContains(t, string(e.data), "customer_id")
		}
	}

	// CHARLIE and DELTA are erased after the upgrade, before protect: the
	// erasure cannot find events whose subject_id is null.
	charlie := fixtures["CHARLIE"].customer
	for _, c := range []string{charlie, delta} {
		out, err := cli(ctx, a.urls(), "customers", "erase", "--merchant", "acme", c, "--confirm", c)
		require.NoError(t, err, out)
		require.Contains(t, out, "0 aggregates marked")
	}
	require.Eventually(t, a.projected, 10*time.Second, 10*time.Millisecond)
	require.Contains(t, dumpDB(t, a.dbs.rm.DB), mark("order-notes", "CHARLIE"), "the read models still hold the old events' text")
	rowsBefore := readModelRows(t, a.dbs.rm.DB)

	// A run stopped after one batch; the command finishes it.
	store, err := pubsub.NewStore(a.dbs.es, nil, a.w.vault)
	require.NoError(t, err)
	first, last, err := store.ProtectEvents(ctx, "cli:tester", 0, 3)
	require.NoError(t, err)
	require.Equal(t, 3, first.Found)
	require.Positive(t, last)
	out, err := cli(ctx, a.urls(), "protect")
	require.NoError(t, err, out)
	// CHARLIE's request, orders and schedule, and the two moved orders.
	require.Contains(t, out, "(6 aggregates marked erased)")
	require.Eventually(t, a.projected, 10*time.Second, 10*time.Millisecond)

	after := eventCopies(t, es)
	for table, text := range after {
		require.NotContains(t, text, "-mark", "a marker left in clear in %s", table)
	}
	for table, n := range clearCopies(t, es) {
		require.Zero(t, n, "copies left in clear in %s", table)
	}
	sealed := personalEvents(t, es)
	require.Len(t, sealed, len(clear))
	for id, e := range sealed {
		require.Equal(t, subjectOf(e), e.subject, "subject_id of %s %s", e.typ, id)
		require.Contains(t, string(e.data), `"sealed"`)
		f, _ := aggregates.ByType(e.streamType)
		want, err := f.Decode(e.typ, clear[id].data)
		require.NoError(t, err)
		got, err := a.w.vault.Decoder(f)(e.typ, e.data)
		require.NoError(t, err)
		if e.subject == charlie || e.subject == delta {
			text, err := json.Marshal(got)
			require.NoError(t, err)
			require.Contains(t, string(text), `"erased":[`, "%s of an erased customer reads as erased", e.typ)
			require.NotContains(t, string(text), "-CHARLIE-mark")
			require.NotContains(t, string(text), "-DELTA-mark")
			continue
		}
		require.Equal(t, want, got, "%s %s opens to what it held", e.typ, id)
	}
	// The read models keep what they held, but CHARLIE's: their
	// aggregates were marked, and re-folded.
	rowsAfter := readModelRows(t, a.dbs.rm.DB)
	for table, text := range rowsAfter {
		require.Equal(t, strings.Contains(rowsBefore[table], "-ALPHA-mark"), strings.Contains(text, "-ALPHA-mark"), table)
	}
	rm := dumpDB(t, a.dbs.rm.DB)
	require.NotContains(t, rm, "-CHARLIE-mark")
	require.NotContains(t, rm, "-DELTA-mark")
	require.Contains(t, rm, mark("order-notes", "ALPHA"))
	require.Contains(t, rm, mark("request-content", "BRAVO"))
	o := a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+moved, a.opA, nil)
	require.Nil(t, o.Body["notes"], "the order moved to CHARLIE reads as erased: %s", o.String())

	// Verify passes, and a rebuild gives the same rows.
	out, err = cli(ctx, a.urls(), "verify", "--recheck", "0")
	require.NoError(t, err, out)
	for _, p := range []string{"orders", "service_requests", "schedules"} {
		out, err := cli(ctx, a.urls(), "rebuild", p)
		require.NoError(t, err, out)
	}
	require.Equal(t, rowsAfter, readModelRows(t, a.dbs.rm.DB), "a rebuild gives the same read models")

	// A second run changes nothing.
	out, err = cli(ctx, a.urls(), "protect")
	require.NoError(t, err, out)
	require.Contains(t, out, "protect: 0 events in clear found in 0 batches")
	require.Contains(t, out, "; 0 copies rewritten")
	require.Equal(t, after, eventCopies(t, es))

	// Each run is in the audit log, with counts and no value.
	entries, _, err := a.w.auditTrail.ListAudit(ctx, query.Page{Number: 1, Size: 100})
	require.NoError(t, err)
	var runs []ops.AuditEntry
	for _, e := range entries {
		if e.Action == ops.ActionPersonalDataProtect {
			runs = append(runs, e)
		}
	}
	require.Len(t, runs, 2)
	require.Equal(t, "cli:tester", runs[1].Actor)
	require.EqualValues(t, len(clear)-3, runs[1].Details["sealed"].(float64)+runs[1].Details["shredded"].(float64))
	require.EqualValues(t, 0, runs[0].Details["events_found"])
	details, err := json.Marshal(runs)
	require.NoError(t, err)
	require.NotContains(t, string(details), "-mark")

	// Erasing ALPHA now reaches their old events.
	alpha := fixtures["ALPHA"].customer
	out, err = cli(ctx, a.urls(), "customers", "erase", "--merchant", "acme", alpha, "--confirm", alpha)
	require.NoError(t, err, out)
	require.Contains(t, out, "4 aggregates marked")
	require.Eventually(t, a.projected, 10*time.Second, 10*time.Millisecond)
	o = a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+alphaOrder, a.opA, nil)
	require.Nil(t, o.Body["notes"], o.String())
	require.NotEmpty(t, o.Body["erased"], o.String())
	everywhere := dumpDB(t, es) + dumpDB(t, a.dbs.rm.DB)
	for _, f := range exportMarkerFields {
		require.NotContains(t, everywhere, mark(f, "ALPHA"), "ALPHA's %s", f)
	}
	require.Contains(t, everywhere, mark("order-notes", "BRAVO"))
	out, err = cli(ctx, a.urls(), "verify", "--recheck", "0")
	require.NoError(t, err, out)
}

// Bad flags of app protect are usage errors naming the flag, found before
// anything is opened.
func TestProtectRefusesBadFlags(t *testing.T) {
	t.Parallel()
	nowhere := pgtest.URLs{EventStore: "postgres://127.0.0.1:1/none", ReadModel: "postgres://127.0.0.1:1/none"}
	for args, want := range map[string]string{
		"--batch -1":     "protect: --batch: must be between 1 and 10000, got -1",
		"--batch 0":      "protect: --batch: must be between 1 and 10000, got 0",
		"--batch 10001":  "protect: --batch: must be between 1 and 10000, got 10001",
		"--by \x01":      "protect: --by: must not contain control characters",
		"--batch 5 more": `protect: unexpected arguments ["more"]`,
	} {
		_, err := cli(t.Context(), nowhere, append([]string{"protect"}, strings.Fields(args)...)...)
		require.ErrorAs(t, err, new(usageError), args)
		require.ErrorContains(t, err, want, args)
	}
}
