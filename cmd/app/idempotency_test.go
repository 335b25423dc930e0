package main

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/command"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/internal/pgtest"
)

// withKey is the Authorization header of key with an Idempotency-Key.
func withKey(key, idempotencyKey string) http.Header {
	h := auth(key)
	h.Set("Idempotency-Key", idempotencyKey)
	return h
}

func (a *api) sendOK(method, path string, header http.Header, body any) response {
	a.t.Helper()
	r, err := a.send(method, path, header, body)
	require.NoError(a.t, err)
	return r
}

// countEvents counts the merchant's events of one type.
func (a *api) countEvents(merchantID, typ string) int {
	a.t.Helper()
	var n int
	require.NoError(a.t, a.dbs.es.DB.QueryRowContext(a.t.Context(),
		`SELECT count(*) FROM events WHERE merchant_id = $1 AND type = $2`, merchantID, typ).Scan(&n))
	return n
}

func TestIdempotentWritesReplay(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	body := map[string]any{"customer_id": customer, "amount_cents": 4200}

	first := a.sendOK(http.MethodPost, "/v1/orders", withKey(a.opA, "order-1"), body)
	require.Equal(t, http.StatusCreated, first.Status, "%s", first)
	require.Empty(t, first.Header.Get("Idempotent-Replayed"))

	// The same request again, its JSON spelled differently: the first
	// answer, byte for byte, and no second order.
	again := a.sendOK(http.MethodPost, "/v1/orders", withKey(a.opA, "order-1"),
		`{ "amount_cents": 4200,   "customer_id": "`+customer+`" }`)
	require.Equal(t, http.StatusCreated, again.Status, "%s", again)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first.Raw, again.Raw)
	for _, h := range []string{"Location", "ETag", "Consistency-Position", "Content-Type"} {
		require.Equal(t, first.Header.Get(h), again.Header.Get(h), h)
	}
	require.NotEqual(t, first.Header.Get("X-Correlation-ID"), again.Header.Get("X-Correlation-ID"), "each request has its own")
	require.Equal(t, 1, a.countEvents(a.merchantA, "OrderCreated"))

	// Another body with the same key is refused; another route too.
	other := a.sendOK(http.MethodPost, "/v1/orders", withKey(a.opA, "order-1"), map[string]any{"customer_id": customer, "amount_cents": 1})
	requireProblem(t, other, http.StatusUnprocessableEntity, "/problems/idempotency-key-reused")
	route := a.sendOK(http.MethodPost, "/v1/customers", withKey(a.opA, "order-1"), body)
	requireProblem(t, route, http.StatusUnprocessableEntity, "/problems/idempotency-key-reused")

	// Keys are per merchant: B's "order-1" is B's own.
	customerB := a.createCustomer(a.opB, "Bea")
	b := a.sendOK(http.MethodPost, "/v1/orders", withKey(a.opB, "order-1"), map[string]any{"customer_id": customerB})
	require.Equal(t, http.StatusCreated, b.Status, "%s", b)
	require.Empty(t, b.Header.Get("Idempotent-Replayed"))

	// Without a key, the same request writes again.
	a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, body)
	require.Equal(t, 2, a.countEvents(a.merchantA, "OrderCreated"))

	// A reference record: one customer however often the create is sent.
	c1 := a.sendOK(http.MethodPost, "/v1/customers", withKey(a.opA, "cust-1"), map[string]any{"name": "Cy"})
	c2 := a.sendOK(http.MethodPost, "/v1/customers", withKey(a.opA, "cust-1"), map[string]any{"name": "Cy"})
	require.Equal(t, http.StatusCreated, c1.Status, "%s", c1)
	require.Equal(t, c1.Raw, c2.Raw)
	require.Equal(t, c1.Header.Get("Location"), c2.Header.Get("Location"))
	require.Equal(t, "true", c2.Header.Get("Idempotent-Replayed"))
	_, total := a.crmAll(a.opA, "/v1/customers?q=Cy", 50)
	require.Equal(t, 1, total)

	// A PATCH of a record and a flow (assignment) replay as well.
	p1 := a.sendOK(http.MethodPatch, "/v1/customers/"+customer, withKey(a.opA, "patch-1"), map[string]any{"phone": "555"})
	p2 := a.sendOK(http.MethodPatch, "/v1/customers/"+customer, withKey(a.opA, "patch-1"), map[string]any{"phone": "555"})
	require.Equal(t, http.StatusOK, p1.Status, "%s", p1)
	require.Equal(t, p1.Raw, p2.Raw)
	order := first.Body["id"].(string)
	assign := map[string]any{"staff_id": a.staffA, "start_at": "2030-01-02T09:00:00Z", "end_at": "2030-01-02T10:00:00Z"}
	s1 := a.sendOK(http.MethodPut, "/v1/orders/"+order+"/assignment", withKey(a.opA, "assign-1"), assign)
	s2 := a.sendOK(http.MethodPut, "/v1/orders/"+order+"/assignment", withKey(a.opA, "assign-1"), assign)
	require.Equal(t, http.StatusOK, s1.Status, "%s", s1)
	require.Equal(t, s1.Raw, s2.Raw)
	require.Equal(t, []string{"OrderCreated", "OrderAssignmentUpdated", "OrderStatusChanged"}, types(a.stream(order)), "assigned once")
}

func TestIdempotentRefusalsAreKeptConflictsAreNot(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")

	// A refused write (422) is kept: the retry is told the same.
	bad := map[string]any{"customer_id": customer, "amount_cents": -1}
	r1 := a.sendOK(http.MethodPost, "/v1/orders", withKey(a.opA, "bad-1"), bad)
	requireProblem(t, r1, http.StatusUnprocessableEntity, "/problems/validation-failed")
	r2 := a.sendOK(http.MethodPost, "/v1/orders", withKey(a.opA, "bad-1"), bad)
	require.Equal(t, r1.Raw, r2.Raw)
	require.Equal(t, "true", r2.Header.Get("Idempotent-Replayed"))

	// A conflict (409) is not: the key is free again, the retry runs.
	order := a.createOrder(a.opA, customer, 100)
	stale := map[string]any{"expected_version": 7, "status": "confirmed"}
	c1 := a.sendOK(http.MethodPost, "/v1/orders/"+order+"/status", withKey(a.opA, "conf-1"), stale)
	requireProblem(t, c1, http.StatusConflict, "/problems/conflict")
	c2 := a.sendOK(http.MethodPost, "/v1/orders/"+order+"/status", withKey(a.opA, "conf-1"), stale)
	requireProblem(t, c2, http.StatusConflict, "/problems/conflict")
	require.Empty(t, c2.Header.Get("Idempotent-Replayed"), "a conflict is run again, not replayed")

	// A malformed key is refused before anything runs.
	for _, key := range []string{"has space", strings.Repeat("k", 256), "naïve"} {
		r := a.sendOK(http.MethodPost, "/v1/orders", withKey(a.opA, key), map[string]any{"customer_id": customer})
		requireProblem(t, r, http.StatusBadRequest, "/problems/malformed-request")
		require.Contains(t, problemFields(r), "Idempotency-Key")
	}
	require.Equal(t, 1, a.countEvents(a.merchantA, "OrderCreated"))
}

// Retries racing each other with one key write one set of events, and all
// of them are told the answer of the one that wrote.
func TestConcurrentIdempotentRetriesWriteOnce(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	request := a.createRequest(customer)

	const retries = 16
	var wg sync.WaitGroup
	answers := make([]response, retries)
	errs := make([]error, retries)
	start := make(chan struct{})
	for i := range retries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i], errs[i] = a.send(http.MethodPost, "/v1/service-requests/"+request+"/convert", withKey(a.opA, "convert-1"), nil)
		}()
	}
	close(start)
	wg.Wait()
	for i := range retries {
		require.NoError(t, errs[i])
		require.Equal(t, http.StatusCreated, answers[i].Status, "%s", answers[i])
		require.Equal(t, answers[0].Raw, answers[i].Raw)
	}
	require.Equal(t, 1, a.countEvents(a.merchantA, "OrderCreated"))
	require.Equal(t, 1, a.countEvents(a.merchantA, "ServiceRequestConverted"))
}

// createRequest creates a confirmed service request.
func (a *api) createRequest(customer string) string {
	a.t.Helper()
	id := a.crmCreate(a.opA, "/v1/service-requests", map[string]any{"customer_id": customer, "content": "Fix the sink"})
	a.must(http.StatusOK, http.MethodPost, "/v1/service-requests/"+id+"/status", a.opA, map[string]any{"status": "confirmed"})
	return id
}

// An attempt whose lease ran out (its process died mid-write) is taken
// over by a retry; should the old attempt still try to commit, its write
// fails whole, so the key writes once.
func TestIdempotencyTakeoverWritesOnce(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	customer := a.createCustomer(a.opA, "Ada")
	store := a.w.idempotency
	fp := []byte("fingerprint")

	old, err := store.Claim(ctx, a.merchantA, "k", fp, time.Millisecond)
	require.NoError(t, err)
	require.NotEmpty(t, old)
	var retry string
	require.Eventually(t, func() bool { // the lease runs out on the database's clock
		retry, err = store.Claim(ctx, a.merchantA, "k", fp, time.Hour)
		return err == nil && retry != ""
	}, 5*time.Second, 5*time.Millisecond)
	again, err := store.Claim(ctx, a.merchantA, "k", fp, time.Hour)
	require.NoError(t, err)
	require.Empty(t, again, "a live lease is not taken over")
	other, err := store.Claim(ctx, a.merchantA, "k", []byte("another request"), time.Hour)
	require.NoError(t, err)
	require.Empty(t, other)

	create := func(token string) (command.Written, error) {
		i := &command.Idempotent{MerchantID: a.merchantA, Key: "k", Token: token,
			Render: func(context.Context, any) (command.Answer, error) {
				return command.Answer{Status: http.StatusCreated, Header: map[string]string{"ETag": `"1"`}, Body: []byte(token)}, nil
			}}
		meta := event.Meta{MerchantID: a.merchantA, Actor: "test", CorrelationID: token, OccurredAt: time.Now()}
		return a.w.app.Commands.Orders.Create(command.WithIdempotent(ctx, i), command.CreateOrder{Meta: meta, CustomerID: customer})
	}
	_, err = create(old)
	require.ErrorIs(t, err, command.ErrKeyTakenOver)
	require.Equal(t, 0, a.countEvents(a.merchantA, "OrderCreated"), "the old attempt's events were rolled back")

	_, err = create(retry)
	require.NoError(t, err)
	require.Equal(t, 1, a.countEvents(a.merchantA, "OrderCreated"))
	rec, err := store.Get(ctx, a.merchantA, "k")
	require.NoError(t, err)
	require.NotNil(t, rec.Answer)
	require.Equal(t, retry, string(rec.Answer.Body))
	require.Equal(t, `"1"`, rec.Answer.Header["ETag"])

	_, err = create(retry)
	require.ErrorIs(t, err, command.ErrKeyTakenOver, "an answered key is never answered twice")
	require.Equal(t, 1, a.countEvents(a.merchantA, "OrderCreated"))
}

func TestIdempotencyKeysArePruned(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	store := a.w.idempotency
	for i := range 5 {
		_, err := store.Claim(ctx, a.merchantA, "old-"+strconv.Itoa(i), []byte("x"), time.Minute)
		require.NoError(t, err)
	}
	_, err := a.dbs.es.DB.ExecContext(ctx, `UPDATE idempotency_keys SET created_at = now() - interval '25 hours'`)
	require.NoError(t, err)
	_, err = store.Claim(ctx, a.merchantA, "young", []byte("x"), time.Minute)
	require.NoError(t, err)

	n, err := store.Prune(ctx, 24*time.Hour, 2)
	require.NoError(t, err)
	require.Equal(t, 2, n, "one batch")
	pruned := make(chan struct{})
	loopCtx, stop := context.WithCancel(ctx)
	go func() {
		defer close(pruned)
		store.PruneLoop(loopCtx, 24*time.Hour, time.Hour, 2, func(err error) { t.Error(err) })
	}()
	require.Eventually(t, func() bool {
		var left []string
		rows, err := a.dbs.es.DB.QueryContext(ctx, `SELECT key FROM idempotency_keys`)
		if err != nil {
			return false
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			if rows.Scan(&k) == nil {
				left = append(left, k)
			}
		}
		return len(left) == 1 && left[0] == "young"
	}, 5*time.Second, 10*time.Millisecond, "batches run until a short one")
	stop()
	<-pruned
	_, err = store.Get(ctx, a.merchantA, "old-0")
	require.True(t, errors.Is(err, apperr.ErrNotFound), "%v", err)
}
