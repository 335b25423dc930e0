package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/vault"
	"hearth/app/command"
	"hearth/app/ops"
	"hearth/app/query"
	"hearth/domain/civil"
	"hearth/domain/event"
	"hearth/domain/plan"
	"hearth/domain/uuid"
	"hearth/internal/keyring"
)

// Erasing a customer ends their service plans in the same transaction, and
// the generator then cancels the orders of the ended plan's visits not
// started yet, as it does for any plan that ends (their bookings hold staff
// members' time; nobody can make a visit to a customer whose address is
// gone), its reason sealed away at once as an erased customer's text is.
// It creates no order for an erased customer's plan (a visit's order
// carries notes, personal) and, once those are cancelled, attempts no visit
// of theirs, run after run.
func TestErasureEndsPlansAndGeneratorSkipsThem(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	// The generator seals the orders' notes as the worker's does.
	ring, err := keyring.Parse(testMasterKey)
	require.NoError(t, err)
	vlt, err := vault.New(a.dbs.es.DB, ring)
	require.NoError(t, err)
	store, err := pubsub.NewStore(a.dbs.es, nil, vlt)
	require.NoError(t, err)
	tx, err := pubsub.NewTransactor(store)
	require.NoError(t, err)
	g, err := command.NewVisitGenerator(tx)
	require.NoError(t, err)
	attempts := 0
	g.Between = func(context.Context) { attempts++ }

	done, err := e.run(t, g)
	require.NoError(t, err)
	require.Equal(t, 4, done.Created)
	var customer string
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(),
		`SELECT data->>'customer_id' FROM events WHERE stream_id = $1 AND version = 1`, e.planID).Scan(&customer))
	ended := func(id string) bool {
		var last string
		require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(),
			`SELECT type FROM events WHERE stream_id = $1 ORDER BY version DESC LIMIT 1`, id).Scan(&last))
		return last == plan.Ended{}.EventType()
	}
	require.False(t, ended(e.planID))

	a.must(http.StatusOK, http.MethodPost, "/v1/customers/"+customer+"/erase", a.opA, map[string]any{"confirm": customer})
	require.True(t, ended(e.planID), "the erasure ended the customer's plan")
	entries, _, err := a.w.auditTrail.ListAudit(t.Context(), query.Page{Number: 1, Size: 100})
	require.NoError(t, err)
	var plansEnded []any
	for _, en := range entries {
		if en.Action == ops.ActionCustomerErase {
			plansEnded = append(plansEnded, en.Details["plans_ended"])
		}
	}
	require.Equal(t, []any{float64(0), float64(1)}, plansEnded, "the first pass ended the plan, the second found it ended (newest first)")

	// A new plan for the erased customer is refused. One that reached the
	// store anyway (its transaction raced the erasure's) and the ended
	// one: no attempt, run after run.
	item := a.crmCreate(a.opA, "/v1/catalog-items", map[string]any{"name": "After erasure", "base_price_cents": 100})
	start := e.now.AddDate(0, 0, 2)
	refused := a.must(http.StatusConflict, http.MethodPost, "/v1/plans", a.opA, map[string]any{
		"customer_id": customer, "catalog_item_id": item, "window": map[string]any{"start": "09:00", "end": "10:00"},
		"recurrence": map[string]any{"frequency": "weekly", "interval": 1, "start": start.Format(time.DateOnly), "count": 3}})
	require.Contains(t, refused.Body["detail"], "was erased")
	later := uuid.New()
	raced, err := plan.New(plan.NewPlan{ID: later, CustomerID: customer, CatalogItemID: item, TimeZone: "UTC", Terms: plan.Terms{
		PriceCents: 100, Window: plan.Window{Start: civil.At(9, 0), End: civil.At(10, 0)},
		Recurrence: plan.Recurrence{Frequency: plan.Weekly, Interval: 1, Start: civil.DateOf(start, time.UTC), Count: 3}}}, e.now)
	require.NoError(t, err)
	_, err = tx.Run(t.Context(), event.Meta{MerchantID: a.merchantA, Actor: "test", CorrelationID: uuid.New(), OccurredAt: e.now},
		func(_ context.Context, s command.Session) error { s.AddServicePlan(raced); return nil })
	require.NoError(t, err)
	attempts = 0
	done, err = e.run(t, g)
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{Cancelled: 4}, done, "the ended plan's visits not started yet are cancelled")
	var clear int
	require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT count(*) FROM events WHERE type = 'OrderCancelled'
		AND (data::text LIKE '%no longer has%' OR subject_id IS DISTINCT FROM $1)`, customer).Scan(&clear))
	require.Zero(t, clear, "the reasons are sealed for the customer, under no key kept")
	attempts = 0
	events := a.events("")
	for range 2 {
		done, err = e.run(t, g)
		require.NoError(t, err)
		require.Equal(t, command.VisitsDone{}, done)
	}
	require.Zero(t, attempts, "no visit of an erased customer's plan is attempted")
	require.Equal(t, events, a.events(""), "nothing written")
	require.False(t, ended(later))
	created, ledger := e.orders(t)
	require.Equal(t, 4, created, "the orders created before the erasure stay, cancelled")
	require.Equal(t, 4, ledger)
}
