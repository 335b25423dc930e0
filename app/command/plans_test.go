package command_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/command"
	"hearth/domain/apperr"
	"hearth/domain/civil"
	"hearth/domain/plan"
	"hearth/domain/uuid"
)

func (e env) planHandlers(t *testing.T) command.PlanHandlers {
	h, err := command.NewPlanHandlers(e.tx)
	require.NoError(t, err)
	return h
}

func weeklyPlan(e env) command.CreatePlan {
	return command.CreatePlan{Meta: e.meta(), CustomerID: e.customer, CatalogItemID: e.item, StaffID: e.staff,
		Window:     plan.Window{Start: civil.At(9, 0), End: civil.At(11, 0)},
		Recurrence: plan.Recurrence{Frequency: plan.Weekly, Interval: 1, Start: civil.DateOf(t0, time.UTC).AddDays(1), Count: 4}}
}

// A plan with bad fields and bad references names every one of them at
// once and appends nothing; a good one takes the merchant's time zone and
// the catalog item's price.
func TestCreatePlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := e.planHandlers(t)
	before := e.tx.Position()
	bad := weeklyPlan(e)
	bad.CustomerID, bad.StaffID = uuid.New(), e.inactive
	bad.Window.End = civil.At(8, 0)
	_, err := h.Create(t.Context(), bad)
	var v *apperr.ValidationError
	require.ErrorAs(t, err, &v)
	require.ElementsMatch(t, []string{"customer_id", "staff_id", "window.end"}, v.FieldNames())
	e.unchanged(t, before)

	e.tx.SetTimeZone(e.merchant, "Australia/Sydney")
	w, err := h.Create(t.Context(), weeklyPlan(e))
	require.NoError(t, err)
	created := w.Stream[0].Event.(plan.Created)
	require.Equal(t, "Australia/Sydney", created.TimeZone)
	require.EqualValues(t, price, created.Terms.PriceCents)
}

// A plan for an erased customer is refused as a conflict, and nothing is
// appended: its visits could never be generated.
func TestCreatePlanForAnErasedCustomerIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tx.EraseCustomer(e.merchant, e.customer)
	before := e.tx.Position()
	_, err := e.planHandlers(t).Create(t.Context(), weeklyPlan(e))
	var conflict *apperr.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Contains(t, conflict.Detail, "was erased")
	e.unchanged(t, before)
}

// The visit generator on the in-memory store: one order per visit, the
// preferred staff member booked, nothing more on a second run.
func TestVisitGeneratorInMemory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w, err := e.planHandlers(t).Create(t.Context(), weeklyPlan(e))
	require.NoError(t, err)
	g, err := command.NewVisitGenerator(e.tx)
	require.NoError(t, err)
	run := command.GenerateVisits{MerchantID: e.merchant, PlanID: w.Stream[0].StreamID, Now: t0, Horizon: 8 * 7 * 24 * time.Hour}
	done, err := g.Plan(t.Context(), run)
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{Created: 4}, done)
	for d := range 4 {
		key := plan.VisitKey(run.PlanID, civil.DateOf(t0, time.UTC).AddDays(1+7*d))
		require.Equal(t, []string{"OrderCreated", "OrderAssignmentUpdated", "OrderStatusChanged"}, e.tx.Types(plan.VisitOrderID(key, 0)))
	}
	done, err = g.Plan(t.Context(), run)
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{}, done)
}
