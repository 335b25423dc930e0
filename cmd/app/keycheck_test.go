package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// revokeSecret revokes the key whose secret is given.
func (a *api) revokeSecret(secret string) {
	a.t.Helper()
	_, err := a.dbs.es.DB.ExecContext(a.t.Context(),
		`UPDATE api_keys SET revoked_at = now() WHERE key_hash = sha256(convert_to($1, 'UTF8'))`, secret)
	require.NoError(a.t, err)
}

// A write to an aggregate by a key known lately checks the key in its own
// transaction instead of looking it up first (access.KeyCheck): a key
// revoked meanwhile writes nothing and is told 401, and so is any other
// answer such a request would have had.
func TestWritesCheckTheirKeyInTheirTransaction(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	order := map[string]any{"customer_id": customer, "amount_cents": 4200}
	refused := map[string]any{"customer_id": customer, "amount_cents": -1} // 422 before any transaction
	l := limitedWith(t, a, Config{}, true)
	lookups := func() int32 { return l.keys.lookups.Load() }
	post := func(key string, body any) response {
		t.Helper()
		r, err := l.send(http.MethodPost, "/v1/orders", auth(key), body)
		require.NoError(t, err)
		return r
	}
	created := func() int { return a.countEvents(a.merchantA, "OrderCreated") }

	require.Equal(t, http.StatusCreated, post(a.opA, order).Status)
	require.Equal(t, int32(1), lookups(), "a key not known yet is looked up")
	for range 2 {
		require.Equal(t, http.StatusCreated, post(a.opA, order).Status)
	}
	require.Equal(t, int32(1), lookups(), "a known key's writes check it in their transactions")
	require.Len(t, l.keysUsed(), 3)
	require.Equal(t, http.StatusOK, l.from("", a.opA, "/v1/orders").Status)
	require.Equal(t, int32(2), lookups(), "a read looks its key up")
	h := auth(a.opA)
	h.Set("Idempotency-Key", "once")
	r, err := l.send(http.MethodPost, "/v1/orders", h, order)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r)
	require.Equal(t, int32(3), lookups(), "a write with an Idempotency-Key looks its key up: its claim writes")
	require.Equal(t, 4, created())
	require.Len(t, l.keysUsed(), 5)

	a.revokeSecret(a.opA)
	requireProblem(t, post(a.opA, order), http.StatusUnauthorized, "/problems/unauthenticated")
	require.Equal(t, int32(3), lookups(), "refused by the write's own check")
	require.Equal(t, 4, created(), "the refused write wrote nothing")
	require.Len(t, l.keysUsed(), 5, "a refused key was not used")
	requireProblem(t, post(a.opA, order), http.StatusUnauthorized, "/problems/unauthenticated")
	require.Equal(t, int32(4), lookups(), "a key refused is forgotten: looked up, and refused before its write runs")
	require.Equal(t, 4, created())

	// An answer that comes before any transaction waits for a lookup.
	second := a.newOperatorKey("acme")
	require.Equal(t, http.StatusCreated, post(second, order).Status)
	requireProblem(t, post(second, refused), http.StatusUnprocessableEntity, "/problems/validation-failed")
	require.Equal(t, int32(6), lookups(), "the 422 went out once the key was looked up")
	a.revokeSecret(second)
	requireProblem(t, post(second, refused), http.StatusUnauthorized, "/problems/unauthenticated")
	require.Equal(t, int32(7), lookups())

	// A role's refusal too: a worker may read orders but not create them.
	require.Equal(t, http.StatusOK, l.from("", a.worker, "/v1/orders").Status)
	requireProblem(t, post(a.worker, order), http.StatusForbidden, "/problems/forbidden")
	a.revokeSecret(a.worker)
	requireProblem(t, post(a.worker, order), http.StatusUnauthorized, "/problems/unauthenticated")
	require.Equal(t, 5, created())

	// With the key cache on, reads trust it for KEY_CACHE_TTL as before;
	// writes to aggregates still check the key in their transactions.
	cached := limitedWith(t, a, Config{KeyCacheTTL: 5 * time.Second}, true)
	third := a.newOperatorKey("acme")
	r, err = cached.send(http.MethodPost, "/v1/orders", auth(third), order)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r)
	a.revokeSecret(third)
	require.Equal(t, http.StatusOK, cached.from("", third, "/v1/orders").Status, "a read within the TTL")
	r, err = cached.send(http.MethodPost, "/v1/orders", auth(third), order)
	require.NoError(t, err)
	requireProblem(t, r, http.StatusUnauthorized, "/problems/unauthenticated")
	require.Equal(t, 6, created())
	require.Equal(t, int32(1), cached.keys.lookups.Load())
}
