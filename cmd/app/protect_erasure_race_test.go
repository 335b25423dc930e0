package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/ops"
	"hearth/domain/event"
	"hearth/internal/pgtest"
)

// A customer erased while app protect seals their old events: the erasure
// cannot find events whose subject_id is null, so protect must see the
// erasure, seal them under a key never stored and mark their aggregates. A
// batch that took the customer for live (their data key got or created
// before the erasure committed) would leave a data key stored for an erased
// customer and the read models showing the text, with nothing marked.
func TestProtectBesideAnErasureOfTheSameCustomer(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	old := a.previousRelease()
	customer := a.createCustomer(a.opA, "Ada")
	orderID := old.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
		"customer_id": customer, "amount_cents": 1000, "notes": "ADA-SECRET ring twice"}).Body["id"].(string)

	// The erasure's pass has done its work and holds its transaction open
	// (its audit entry is its last statement).
	release := a.holdIn(`BEFORE INSERT ON admin_audit FOR EACH STATEMENT`)
	_, _, store := a.writeInstance()
	erased := make(chan error, 1)
	go func() {
		_, err := store.EraseSubject(ctx, ops.ErasureRequest{By: "test", MerchantID: a.merchantA, SubjectType: event.SubjectCustomer,
			SubjectID: customer, Confirm: customer}, func(ops.Erasure) ops.AuditEntry {
			return ops.AuditEntry{Actor: "test", Action: ops.ActionCustomerErase, Target: "customer/" + customer}
		})
		erased <- err
	}()
	require.Eventually(t, a.lockWaiting(`%INSERT INTO admin_audit%`), 20*time.Second, 10*time.Millisecond, "the erasure holds")

	protected := a.queuedOrEnded(t, func() error {
		_, _, err := store.ProtectEvents(ctx, "test", 0, 100)
		return err
	}, "protect waits for the erasure, or ends")
	release()
	require.NoError(t, <-erased)
	perr := protected()
	require.NoError(t, perr)

	var keys int
	require.NoError(t, a.dbs.es.DB.QueryRowContext(ctx, `SELECT count(*) FROM data_keys WHERE subject_id = $1`, customer).Scan(&keys))
	require.Zero(t, keys, "no data key is stored for an erased customer")
	var marked int
	require.NoError(t, a.dbs.es.DB.QueryRowContext(ctx, `SELECT count(*) FROM events
		WHERE stream_id = $1 AND type = $2 AND data->>'subject_id' = $3`, orderID, event.PersonalDataErasedType, customer).Scan(&marked))
	require.Equal(t, 1, marked, "the order is marked erased, so the read models forget its notes")
	require.Eventually(t, func() bool {
		o := a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+orderID, a.opA, nil)
		return o.Body["notes"] == nil
	}, 10*time.Second, 10*time.Millisecond, "the order's notes read as erased")
}
