package main

import (
	"database/sql"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/vault"
	"hearth/app/command"
	"hearth/internal/pgtest"
)

// readModelState is every read-model table and the change log, row for
// row, as text (the change log without its serial id, which a rebuild
// does not touch).
func readModelState(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, table := range []string{"orders", "service_requests", "schedules", "plans"} {
		var text sql.NullString
		require.NoError(t, db.QueryRowContext(t.Context(),
			`SELECT string_agg(t::text, E'\n' ORDER BY t.id) FROM `+table+` t`).Scan(&text))
		out[table] = text.String
	}
	var text sql.NullString
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT string_agg(concat_ws(' ', merchant_id, aggregate_type, aggregate_id,
		event_id, version, action, actor, before, after, occurred_at), E'\n' ORDER BY aggregate_id, version) FROM change_log`).Scan(&text))
	out["change_log"] = text.String
	return out
}

// awaitProjected waits until every event of an aggregate with a read model
// has its change-log row.
func (a *api) awaitProjected() {
	a.t.Helper()
	require.Eventually(a.t, func() bool {
		var events, changes int
		ctx := a.t.Context()
		if a.dbs.es.DB.QueryRowContext(ctx, `SELECT count(*) FROM events WHERE stream_type <> 'data_subject'`).Scan(&events) != nil ||
			a.dbs.rm.DB.QueryRowContext(ctx, `SELECT count(*) FROM change_log`).Scan(&changes) != nil {
			return false
		}
		return changes == events
	}, 10*time.Second, 10*time.Millisecond, "every event projected")
}

// Every flow through the API (orders dispatched, settled, cancelled;
// assignments restated; an appointment taken off with null; service plans
// skipped, moved, changed, paused, resumed and ended, with the visit
// generator's orders; a customer's and a staff member's erasure, and the
// erased customer's order cancelled after it), then verify passes and a
// rebuild of each projection leaves every row and the change log as the
// live projections wrote them.
func TestVerifyAndRebuildAgreeWithTheLiveReadModelsAfterEveryFlow(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	a.everyFlow()

	out, err := cli(t.Context(), a.urls(), "verify", "--recheck", "0")
	require.NoError(t, err, out)
	live := readModelState(t, a.dbs.rm.DB)
	for _, p := range []string{"orders", "service_requests", "schedules", "plans"} {
		out, err := cli(t.Context(), a.urls(), "rebuild", p)
		require.NoError(t, err, out)
		require.Equal(t, live, readModelState(t, a.dbs.rm.DB), "the rebuild of %s changed the read model", p)
	}
}

// everyFlow drives every flow through the API (see
// TestVerifyAndRebuildAgreeWithTheLiveReadModelsAfterEveryFlow) and waits
// until the read models have applied every event.
func (a *api) everyFlow() {
	a.t.Helper()
	alpha, bravo := a.exportFixture("ALPHA", 9), a.exportFixture("BRAVO", 11)

	// A service request whose appointment is taken off.
	req := a.must(http.StatusCreated, http.MethodPost, "/v1/service-requests", a.opA, map[string]any{
		"customer_id": alpha.customer, "content": "leak", "source": "phone",
		"appointment_start_at": "2030-02-01T09:00:00Z", "appointment_end_at": "2030-02-01T10:00:00Z"}).Body["id"].(string)
	a.must(http.StatusOK, http.MethodPatch, "/v1/service-requests/"+req, a.opA, map[string]any{
		"appointment_start_at": nil, "appointment_end_at": nil})

	// An assignment restated, another staff member's, who is then erased.
	sam := a.must(http.StatusCreated, http.MethodPost, "/v1/staff", a.opA, map[string]any{"name": "Sam"}).Body["id"].(string)
	order := a.createOrder(a.opA, bravo.customer, 1200)
	assignment := map[string]any{"staff_id": sam, "start_at": "2030-03-01T09:00:00Z", "end_at": "2030-03-01T10:00:00Z", "dispatch_note": "ring"}
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order+"/assignment", a.opA, assignment)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order+"/assignment", a.opA, assignment)
	assignment["start_at"], assignment["end_at"] = "2030-03-02T09:00:00Z", "2030-03-02T10:00:00Z"
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order+"/assignment", a.opA, assignment)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order+"/settlement", a.opA, map[string]any{
		"settlement_status": "settled", "paid_amount_cents": 1200, "payment_method": "cash"})

	// A plan of each customer, its visits made by the generator, then
	// skipped, moved, changed, paused, resumed and ended.
	item := a.crmCreate(a.opA, "/v1/catalog-items", map[string]any{"name": "Weekly clean", "base_price_cents": 4500})
	start := time.Now().UTC().AddDate(0, 0, 1)
	plans := map[string]string{}
	for _, c := range []string{alpha.customer, bravo.customer} {
		plans[c] = a.must(http.StatusCreated, http.MethodPost, "/v1/plans", a.opA, map[string]any{
			"customer_id": c, "catalog_item_id": item, "staff_id": a.staffA,
			"window":     map[string]any{"start": "09:00", "end": "11:00"},
			"recurrence": map[string]any{"frequency": "weekly", "interval": 1, "start": start.Format(time.DateOnly), "count": 5}}).Body["id"].(string)
	}
	vlt, err := vault.New(a.dbs.es.DB, a.cfg.MasterKeys)
	require.NoError(a.t, err)
	store, err := pubsub.NewStore(a.dbs.es, nil, vlt)
	require.NoError(a.t, err)
	tx, err := pubsub.NewTransactor(store)
	require.NoError(a.t, err)
	g, err := command.NewVisitGenerator(tx)
	require.NoError(a.t, err)
	listed, err := pubsub.NewPlans(a.dbs.es.DB)
	require.NoError(a.t, err)
	generate := func() {
		a.t.Helper()
		_, err := g.All(a.t.Context(), listed, time.Now().UTC(), 8*7*24*time.Hour)
		require.NoError(a.t, err)
	}
	generate()
	day := func(weeks int) string { return start.AddDate(0, 0, 7*weeks).Format(time.DateOnly) }
	for _, id := range plans {
		a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+id+"/skip", a.opA, map[string]any{"date": day(1)})
		a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+id+"/move", a.opA, map[string]any{"date": day(2), "to_date": day(2), "start": "14:00"})
		a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+id+"/change", a.opA, map[string]any{"from": day(3), "price_cents": 5000})
		generate()
	}
	a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+plans[bravo.customer]+"/pause", a.opA, nil)
	generate()
	a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+plans[bravo.customer]+"/resume", a.opA, nil)
	generate()
	a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+plans[bravo.customer]+"/end", a.opA, nil)
	generate()

	// The erasures; the erased customer's open order is cancelled after it.
	open := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
		"customer_id": alpha.customer, "amount_cents": 900, "notes": "gate code 1234"}).Body["id"].(string)
	a.must(http.StatusOK, http.MethodPost, "/v1/customers/"+alpha.customer+"/erase", a.opA, map[string]any{"confirm": alpha.customer})
	a.must(http.StatusOK, http.MethodPost, "/v1/staff/"+sam+"/erase", a.opA, map[string]any{"confirm": sam})
	generate()
	a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+open+"/cancel", a.opA, map[string]any{"reason": "customer gone"})
	// Writes that say nothing about the erased customer: their booking's
	// schedule cancelled (the order loses its staff member), a payment
	// without a note.
	a.must(http.StatusOK, http.MethodPost, "/v1/schedules/"+alpha.ids[3]+"/status", a.opA, map[string]any{"status": "cancelled"})
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+alpha.ids[1]+"/settlement", a.opA, map[string]any{
		"settlement_status": "unsettled", "paid_amount_cents": 0})
	a.awaitProjected()
}

// A read model caught up from scratch (restored from a backup taken before
// any write, its projections rewound as the runbook says) reads every
// topic again and ends up as the live projections left it, row for row and
// change-log row for change-log row, erasures and the writes after them
// included.
func TestACatchUpFromScratchReproducesTheLiveReadModels(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewSplitDBs(t)
	ctx := t.Context()
	var live map[string]string
	dump := filepath.Join(t.TempDir(), "rm.dump") // outlives the subtest
	t.Run("live", func(t *testing.T) {
		a := setup(t, urls)
		require.NoError(t, os.Rename(backup(t, urls.ReadModel), dump))
		a.everyFlow()
		live = readModelState(t, a.dbs.rm.DB)
	})

	restored := pgtest.URLs{EventStore: urls.EventStore, ReadModel: restoreBackup(t, dump)}
	out, err := cli(ctx, restored, "projections", "rewind", "--by", "ops: from scratch")
	require.NoError(t, err, out)
	b := setup(t, restored)
	b.awaitProjected()
	require.Equal(t, live, readModelState(t, b.dbs.rm.DB), "caught up from scratch, the read models differ from the live ones")
	out, err = cli(ctx, restored, "verify", "--recheck", "0")
	require.NoError(t, err, out)
}
