package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/access"
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

	old, err := store.Claim(ctx, a.merchantA, "operator", "k", fp, time.Millisecond)
	require.NoError(t, err)
	require.NotEmpty(t, old)
	var retry string
	require.Eventually(t, func() bool { // the lease runs out on the database's clock
		retry, err = store.Claim(ctx, a.merchantA, "operator", "k", fp, time.Hour)
		return err == nil && retry != ""
	}, 5*time.Second, 5*time.Millisecond)
	again, err := store.Claim(ctx, a.merchantA, "operator", "k", fp, time.Hour)
	require.NoError(t, err)
	require.Empty(t, again, "a live lease is not taken over")
	other, err := store.Claim(ctx, a.merchantA, "operator", "k", []byte("another request"), time.Hour)
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
	rec, err := store.Get(ctx, a.merchantA, "operator", "k")
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
		_, err := store.Claim(ctx, a.merchantA, "operator", "old-"+strconv.Itoa(i), []byte("x"), time.Minute)
		require.NoError(t, err)
	}
	_, err := a.dbs.es.DB.ExecContext(ctx, `UPDATE idempotency_keys SET created_at = now() - interval '25 hours'`)
	require.NoError(t, err)
	_, err = store.Claim(ctx, a.merchantA, "operator", "young", []byte("x"), time.Minute)
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
	_, err = store.Get(ctx, a.merchantA, "operator", "old-0")
	require.True(t, errors.Is(err, apperr.ErrNotFound), "%v", err)
}

// A key belongs to the principal that sent it (its role, and a worker's
// staff member): another role or another worker reusing it runs its own
// request and is refused what it may not do, never told another principal's
// answer; another key of the same role replays it.
func TestIdempotencyKeysBelongToThePrincipal(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	customer := a.createCustomer(a.opA, "Ada")
	colleague, err := a.w.refdata.CreateStaff(ctx, a.merchantA, "Cole Colleague")
	require.NoError(t, err)
	k, err := a.w.refdata.CreateKey(ctx, "acme", access.Worker, colleague)
	require.NoError(t, err)
	colleagueKey := k.Secret
	schedule := func() string {
		order := a.createOrder(a.opA, customer, 100)
		a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order+"/assignment", a.opA,
			map[string]any{"staff_id": a.staffA, "start_at": "2030-01-02T09:00:00Z", "end_at": "2030-01-02T10:00:00Z"})
		return a.crmSchedule(a.opA, order).Body["id"].(string)
	}

	// The operator cancels a schedule; the worker, who may not cancel,
	// sends the same request with the same key.
	cancelled := schedule()
	path := "/v1/schedules/" + cancelled + "/status"
	cancel := map[string]any{"status": "cancelled"}
	op := a.sendOK(http.MethodPost, path, withKey(a.opA, "shared-1"), cancel)
	require.Equal(t, http.StatusOK, op.Status, "%s", op)
	w := a.sendOK(http.MethodPost, path, withKey(a.worker, "shared-1"), cancel)
	requireProblem(t, w, http.StatusForbidden, "/problems/forbidden")
	require.Empty(t, w.Header.Get("Idempotent-Replayed"), "the worker's own request ran")
	w2 := a.sendOK(http.MethodPost, path, withKey(a.worker, "shared-1"), cancel)
	require.Equal(t, w.Raw, w2.Raw, "the worker's refusal is kept for the worker")
	require.Equal(t, "true", w2.Header.Get("Idempotent-Replayed"))
	// Another operator key of the merchant retries the operator's request.
	again := a.sendOK(http.MethodPost, path, withKey(a.newOperatorKey("acme"), "shared-1"), cancel)
	require.Equal(t, op.Raw, again.Raw)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))

	// A worker starts its schedule; a worker of another staff member sends
	// the same with the same key: the schedule is not its own.
	started := schedule()
	start := map[string]any{"status": "in_service"}
	own := a.sendOK(http.MethodPost, "/v1/schedules/"+started+"/status", withKey(a.worker, "shared-2"), start)
	require.Equal(t, http.StatusOK, own.Status, "%s", own)
	other := a.sendOK(http.MethodPost, "/v1/schedules/"+started+"/status", withKey(colleagueKey, "shared-2"), start)
	requireProblem(t, other, http.StatusNotFound, "/problems/not-found")
	require.Empty(t, other.Header.Get("Idempotent-Replayed"))
}

// A stale If-Match (412) frees its key, as a stale expected_version (409)
// does, so the retry with the right version runs; If-Match is part of the
// request a key names, as expected_version is.
func TestIdempotentStaleIfMatchIsNotKept(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	for _, c := range []struct {
		name         string
		stale, fresh func() (http.Header, map[string]any)
		status       int
		problem      string
	}{
		{"If-Match",
			func() (http.Header, map[string]any) {
				return header(a.opA, "Idempotency-Key", "if-match-1", "If-Match", `"7"`), map[string]any{"status": "confirmed"}
			},
			func() (http.Header, map[string]any) {
				return header(a.opA, "Idempotency-Key", "if-match-1", "If-Match", `"1"`), map[string]any{"status": "confirmed"}
			},
			http.StatusPreconditionFailed, "/problems/precondition-failed"},
		{"expected_version",
			func() (http.Header, map[string]any) {
				return withKey(a.opA, "expected-1"), map[string]any{"status": "confirmed", "expected_version": 7}
			},
			func() (http.Header, map[string]any) {
				return withKey(a.opA, "expected-1"), map[string]any{"status": "confirmed", "expected_version": 1}
			},
			http.StatusConflict, "/problems/conflict"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := "/v1/orders/" + a.createOrder(a.opA, customer, 100) + "/status"
			h, body := c.stale()
			requireProblem(t, a.sendOK(http.MethodPost, path, h, body), c.status, c.problem)
			h, body = c.fresh()
			ok := a.sendOK(http.MethodPost, path, h, body)
			require.Equal(t, http.StatusOK, ok.Status, "%s", ok)
			require.Empty(t, ok.Header.Get("Idempotent-Replayed"), "the key was free: the retry ran")
			h, body = c.fresh()
			replay := a.sendOK(http.MethodPost, path, h, body)
			require.Equal(t, ok.Raw, replay.Raw)
			require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
			h, body = c.stale()
			requireProblem(t, a.sendOK(http.MethodPost, path, h, body), http.StatusUnprocessableEntity, "/problems/idempotency-key-reused")
		})
	}
}

// A stored answer never keeps a webhook endpoint's signing secret: a retry
// of its creation or of a rotation is told 409 secret-shown-once, with the
// endpoint and how to get a new secret, and writes nothing.
func TestIdempotentSecretsAreNotReplayed(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	endpoints := "/v1/webhook-endpoints"
	create := map[string]any{"url": "https://203.0.113.9/hook"}
	first := a.sendOK(http.MethodPost, endpoints, withKey(a.opA, "hook-1"), create)
	require.Equal(t, http.StatusCreated, first.Status, "%s", first)
	require.Contains(t, first.Body["secret"], "whsec_", "the first answer shows the secret")
	id := first.Body["id"].(string)
	self := endpoints + "/" + id

	requireShownOnce := func(r response) {
		t.Helper()
		requireProblem(t, r, http.StatusConflict, "/problems/secret-shown-once")
		require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
		require.Equal(t, self, r.Header.Get("Location"))
		require.Contains(t, r.Body["detail"], "POST "+self+"/rotate-secret")
		require.NotContains(t, r.Raw, "whsec_")
	}
	requireShownOnce(a.sendOK(http.MethodPost, endpoints, withKey(a.opA, "hook-1"), create))
	list := a.must(http.StatusOK, http.MethodGet, endpoints, a.opA, nil)
	require.Len(t, list.Body["items"], 1, "written once")

	rotated := a.sendOK(http.MethodPost, self+"/rotate-secret", withKey(a.opA, "rotate-1"), nil)
	require.Equal(t, http.StatusOK, rotated.Status, "%s", rotated)
	require.Contains(t, rotated.Body["secret"], "whsec_")
	requireShownOnce(a.sendOK(http.MethodPost, self+"/rotate-secret", withKey(a.opA, "rotate-1"), nil))
	got := a.must(http.StatusOK, http.MethodGet, self, a.opA, nil)
	require.Equal(t, float64(2), got.Body["version"], "rotated once")

	var kept int
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(),
		`SELECT count(*) FROM idempotency_keys WHERE merchant_id = $1 AND position('whsec_'::bytea IN body) > 0`, a.merchantA).Scan(&kept))
	require.Zero(t, kept, "no stored answer keeps a secret")
}

// Records from before keys had a scope (migration eventstore/010) answer
// any key of their merchant, as they did, until they are pruned, and are
// compared with the fingerprint of that version (without If-Match): a
// retry across the upgrade writes once.
func TestLegacyIdempotencyRecordsStillAnswer(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	order := a.createOrder(a.opA, customer, 100)
	path := "/v1/orders/" + order + "/status"
	fp := sha256.Sum256([]byte("POST " + path + "\n" + `{"status":"confirmed"}`))
	stored := `{"id":"` + order + `","status":"confirmed","legacy":true}` + "\n"
	_, err := a.dbs.es.DB.ExecContext(t.Context(), `
		INSERT INTO idempotency_keys (merchant_id, scope, key, fingerprint, token, locked_until, status, header, body, completed_at)
		VALUES ($1, '', 'legacy-1', $2, gen_random_uuid(), now(), 200, '{"Content-Type": "application/json", "ETag": "\"2\""}', $3, now())`,
		a.merchantA, fp[:], []byte(stored))
	require.NoError(t, err)

	for _, h := range []http.Header{
		withKey(a.opA, "legacy-1"),
		header(a.newOperatorKey("acme"), "Idempotency-Key", "legacy-1", "If-Match", `"1"`),
	} {
		r := a.sendOK(http.MethodPost, path, h, map[string]any{"status": "confirmed"})
		require.Equal(t, http.StatusOK, r.Status, "%s", r)
		require.Equal(t, stored, r.Raw)
		require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
		require.Equal(t, `"2"`, r.Header.Get("ETag"))
	}
	other := a.sendOK(http.MethodPost, path, withKey(a.opA, "legacy-1"), map[string]any{"status": "cancelled"})
	requireProblem(t, other, http.StatusUnprocessableEntity, "/problems/idempotency-key-reused")
	require.Equal(t, 1, a.events(order), "nothing ran")
}

// Two requests are the same request only when their decoding cannot tell
// them apart: a body the decoding refuses (data after the object, a member
// given twice, an escaped lone surrogate) is not the same as the body it
// would be read as, whichever comes first.
func TestIdempotencyKeyTellsRequestsTheDecodingTellsApart(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))

	cases := []struct {
		name         string
		first, retry string
		firstStatus  int
	}{
		// The refused body first, the corrected one retried.
		{"trailing brace after the object", `{"name":"Cy"}}`, `{"name":"Cy"}`, http.StatusBadRequest},
		{"trailing bracket and garbage", `{"name":"Cy2"}] and then anything at all`, `{"name":"Cy2"}`, http.StatusBadRequest},
		{"member given twice", `{"name":"Dee","name":"Eve"}`, `{"name":"Eve"}`, http.StatusBadRequest},
		{"lone surrogate", `{"name":"Fay \ud800"}`, `{"name":"Fay \ufffd"}`, http.StatusUnprocessableEntity},
		// The valid body first, a malformed one retried.
		{"valid first, trailing brace retried", `{"name":"Gus"}`, `{"name":"Gus"}}`, http.StatusCreated},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := "fp-" + strconv.Itoa(i)
			first := a.sendOK(http.MethodPost, "/v1/customers", withKey(a.opA, key), c.first)
			require.Equal(t, c.firstStatus, first.Status, "%s", first)

			retry := a.sendOK(http.MethodPost, "/v1/customers", withKey(a.opA, key), c.retry)
			require.Empty(t, retry.Header.Get("Idempotent-Replayed"),
				"another request with the same key was replayed the first one's answer: %s", retry)
			requireProblem(t, retry, http.StatusUnprocessableEntity, "/problems/idempotency-key-reused")
		})
	}
}

// A key whose first attempt died unanswered a day ago is taken over by a
// retry; the answer the retry stores is kept IDEMPOTENCY_KEEP from then,
// like any answer: pruned by the age of the dead attempt, a later retry
// would find no record and write again (and the retry's own write, pruned
// while it ran, would fail as taken over).
func TestARetakenIdempotencyKeyIsKeptFromItsRetry(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	store := a.w.idempotency
	fp := []byte("fingerprint")
	dead, err := store.Claim(ctx, a.merchantA, "operator", "k", fp, time.Minute)
	require.NoError(t, err)
	require.NotEmpty(t, dead)
	_, err = a.dbs.es.DB.ExecContext(ctx, `UPDATE idempotency_keys SET created_at = now() - interval '25 hours',
		locked_until = now() - interval '24 hours' WHERE key = 'k'`)
	require.NoError(t, err)

	retry, err := store.Claim(ctx, a.merchantA, "operator", "k", fp, time.Minute)
	require.NoError(t, err)
	require.NotEmpty(t, retry, "the dead attempt's lease ran out")
	n, err := store.Prune(ctx, 24*time.Hour, 100)
	require.NoError(t, err)
	require.Zero(t, n, "the retry holds the key")
	require.NoError(t, store.Complete(ctx, &command.Idempotent{MerchantID: a.merchantA, Key: "k", Token: retry},
		command.Answer{Status: http.StatusUnprocessableEntity, Body: []byte(`{"status":422}`)}))
	n, err = store.Prune(ctx, 24*time.Hour, 100)
	require.NoError(t, err)
	require.Zero(t, n, "the retry's answer is young")
	rec, err := store.Get(ctx, a.merchantA, "operator", "k")
	require.NoError(t, err)
	require.NotNil(t, rec.Answer, "a later retry is answered, not run again")
}

// PUT /v1/settings takes an Idempotency-Key as the other writes do
// (api.md): its answer is stored, and a repeat is answered from there and
// sets nothing, even after another write changed the zone meanwhile.
func TestIdempotentSettingsReplay(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	paris := map[string]any{"time_zone": "Europe/Paris"}
	first := a.sendOK(http.MethodPut, "/v1/settings", withKey(a.opA, "tz-1"), paris)
	require.Equal(t, http.StatusOK, first.Status, "%s", first)
	require.Empty(t, first.Header.Get("Idempotent-Replayed"))
	a.must(http.StatusOK, http.MethodPut, "/v1/settings", a.opA, map[string]any{"time_zone": "Asia/Tokyo"})
	again := a.sendOK(http.MethodPut, "/v1/settings", withKey(a.opA, "tz-1"), paris)
	require.Equal(t, http.StatusOK, again.Status, "%s", again)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first.Raw, again.Raw)
	require.Equal(t, "Asia/Tokyo", a.must(http.StatusOK, http.MethodGet, "/v1/settings", a.opA, nil).Body["time_zone"], "the repeat set nothing")
}

// An erasure forgets the stored answers that name its subject, but not the
// fact that their keys were answered: a retry of the subject's creation
// with the same Idempotency-Key after the erasure runs nothing (no second
// customer or staff member made from the erased person's data, the erasure
// not undone) and is told, without the erased data, that the answer is gone.
func TestARetryAfterAnErasureDoesNotWriteAgain(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	for _, c := range []struct{ name, create string }{
		{"customer", "/v1/customers"},
		{"staff member", "/v1/staff"},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := withKey(a.opA, "create:"+c.create)
			body := map[string]any{"name": "ERASEME " + c.name, "phone": "555-0100"}
			first := a.sendOK(http.MethodPost, c.create, key, body)
			require.Equal(t, http.StatusCreated, first.Status, "%s", first)
			id := first.Body["id"].(string)
			a.must(http.StatusOK, http.MethodPost, c.create+"/"+id+"/erase", a.opA, map[string]any{"confirm": id})

			retry := a.sendOK(http.MethodPost, c.create, key, body)
			require.NotEqual(t, http.StatusCreated, retry.Status, "the retry after the erasure made another %s: %s", c.name, retry)
			requireProblem(t, retry, http.StatusConflict, "/problems/conflict")
			require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"), "%s", retry)
			require.Equal(t, first.Header.Get("Location"), retry.Header.Get("Location"), "the retry is told what its request made")
			require.NotContains(t, retry.Raw, "ERASEME")
			require.NotContains(t, retry.Raw, "555-0100")
			var n int
			require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(),
				`SELECT (SELECT count(*) FROM customers WHERE merchant_id = $1 AND name LIKE 'ERASEME%')
				      + (SELECT count(*) FROM staff WHERE merchant_id = $1 AND name LIKE 'ERASEME%')`, a.merchantA).Scan(&n))
			require.Zero(t, n, "no record holds the erased person's data again")
		})
	}
}

// A claim that raced an erasure (it looked for a forgotten key before the
// erasure committed, then found the answer's record gone and made its own)
// cannot complete: its write rolls back, and the key answers as forgotten.
// Forgotten keys are pruned as the answers are.
func TestAClaimThatRacedAnErasureDoesNotComplete(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	store := a.w.idempotency
	fp := []byte("fingerprint")
	token, err := store.Claim(ctx, a.merchantA, "operator", "k", fp, time.Minute)
	require.NoError(t, err)
	require.NotEmpty(t, token)
	_, err = a.dbs.es.DB.ExecContext(ctx, `INSERT INTO idempotency_forgotten (merchant_id, scope, key, location, created_at)
		VALUES ($1, 'operator', 'k', '/v1/customers/c', now())`, a.merchantA)
	require.NoError(t, err)

	err = store.Complete(ctx, &command.Idempotent{MerchantID: a.merchantA, Key: "k", Token: token},
		command.Answer{Status: http.StatusCreated, Body: []byte(`{"name":"Ada"}`)})
	require.ErrorIs(t, err, command.ErrKeyTakenOver)
	again, err := store.Claim(ctx, a.merchantA, "operator", "k", fp, time.Minute)
	require.NoError(t, err)
	require.Empty(t, again, "a forgotten key is not claimed again")
	rec, err := store.Get(ctx, a.merchantA, "operator", "k")
	require.NoError(t, err)
	require.True(t, rec.Forgotten)
	require.Equal(t, "/v1/customers/c", rec.Location)
	require.Nil(t, rec.Answer)

	_, err = a.dbs.es.DB.ExecContext(ctx, `UPDATE idempotency_forgotten SET created_at = now() - interval '25 hours'`)
	require.NoError(t, err)
	n, err := store.Prune(ctx, 24*time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	rec, err = store.Get(ctx, a.merchantA, "operator", "k")
	require.NoError(t, err)
	require.False(t, rec.Forgotten, "pruned: what is left is the raced claim, young")
}

// A refused write whose answer the database failed to store is answered
// 500, and a 5xx frees its key (api.md): nothing holds it any more, so the
// retry runs at once and is told the refusal, rather than wait and be told
// that a request with the key is still running until the lease runs out.
func TestAnAnswerNotStoredFreesItsKey(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	customer := a.createCustomer(a.opA, "Ada")
	for _, stmt := range []string{
		`CREATE FUNCTION refuse_answer() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'answer refused by the test'; END $$`,
		`CREATE TRIGGER refuse_answer BEFORE UPDATE ON idempotency_keys FOR EACH ROW
			WHEN (NEW.key = 'unstored-1' AND NEW.status IS NOT NULL) EXECUTE FUNCTION refuse_answer()`,
	} {
		_, err := a.dbs.es.DB.ExecContext(ctx, stmt)
		require.NoError(t, err)
	}
	bad := map[string]any{"customer_id": customer, "amount_cents": -1}
	first := a.sendOK(http.MethodPost, "/v1/orders", withKey(a.opA, "unstored-1"), bad)
	requireProblem(t, first, http.StatusInternalServerError, "/problems/internal")
	_, err := a.dbs.es.DB.ExecContext(ctx, `DROP TRIGGER refuse_answer ON idempotency_keys`)
	require.NoError(t, err)

	retry := a.sendOK(http.MethodPost, "/v1/orders", withKey(a.opA, "unstored-1"), bad)
	requireProblem(t, retry, http.StatusUnprocessableEntity, "/problems/validation-failed")
	require.Empty(t, retry.Header.Get("Idempotent-Replayed"), "the retry ran")
	again := a.sendOK(http.MethodPost, "/v1/orders", withKey(a.opA, "unstored-1"), bad)
	require.Equal(t, retry.Raw, again.Raw)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"), "the retry's answer is kept")
}

// PUT /v1/settings stores its answer in the transaction of its write, as
// the other writes do: a write whose answer could not be stored does not
// commit, so a 500 means nothing was set (and a retry after a later change
// does not set again what had already been set).
func TestSettingsAreSetOnlyWithTheirAnswer(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	before := a.must(http.StatusOK, http.MethodGet, "/v1/settings", a.opA, nil).Body["time_zone"]
	require.NotEqual(t, "Europe/Paris", before)
	for _, stmt := range []string{
		`CREATE FUNCTION refuse_answer() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'answer refused by the test'; END $$`,
		`CREATE TRIGGER refuse_answer BEFORE UPDATE ON idempotency_keys FOR EACH ROW
			WHEN (NEW.key = 'tz-unstored' AND NEW.status IS NOT NULL) EXECUTE FUNCTION refuse_answer()`,
	} {
		_, err := a.dbs.es.DB.ExecContext(ctx, stmt)
		require.NoError(t, err)
	}
	paris := map[string]any{"time_zone": "Europe/Paris"}
	failed := a.sendOK(http.MethodPut, "/v1/settings", withKey(a.opA, "tz-unstored"), paris)
	requireProblem(t, failed, http.StatusInternalServerError, "/problems/internal")
	require.Equal(t, before, a.must(http.StatusOK, http.MethodGet, "/v1/settings", a.opA, nil).Body["time_zone"],
		"a write answered 500, its answer not stored, set the zone")

	_, err := a.dbs.es.DB.ExecContext(ctx, `DROP TRIGGER refuse_answer ON idempotency_keys`)
	require.NoError(t, err)
	first := a.sendOK(http.MethodPut, "/v1/settings", withKey(a.opA, "tz-unstored"), paris)
	require.Equal(t, http.StatusOK, first.Status, "%s", first)
	require.Empty(t, first.Header.Get("Idempotent-Replayed"))
	again := a.sendOK(http.MethodPut, "/v1/settings", withKey(a.opA, "tz-unstored"), paris)
	require.Equal(t, first.Raw, again.Raw)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
}

// API instances deployed from different manifests may disagree on
// IDEMPOTENCY_KEEP, and each prunes the one table: a record must be kept as
// long as the longest setting any instance runs with, or a retry sent
// through the instance that keeps keys 72h, 30h after its write, finds its
// record pruned by the one that keeps them 24h and writes again.
func TestAnInstanceWithAShorterIdempotencyKeepDoesNotPruneWhatAnotherKeeps(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t).EventStore
	long := map[string]string{"DATABASE_URL": url, "LOG_FORMAT": "json", "MODE": "api", "IDEMPOTENCY_KEEP": "72h"}
	short := maps.Clone(long)
	short["IDEMPOTENCY_KEEP"] = "24h"
	key := createKeyCLI(t, long, "--merchant", "acme", "--role", "operator")
	db := pgtest.Open(t, url)

	first := startServe(t, long)
	a := &api{t: t, base: "http://" + first.HTTPAddr, client: &http.Client{}}
	body := map[string]any{"customer_id": a.createCustomer(key, "Ada"), "amount_cents": 4200}
	written := a.sendOK(http.MethodPost, "/v1/orders", withKey(key, "order-30h"), body)
	require.Equal(t, http.StatusCreated, written.Status, "%s", written)
	old := a.sendOK(http.MethodPost, "/v1/orders", withKey(key, "order-100h"), body)
	require.Equal(t, http.StatusCreated, old.Status, "%s", old)
	first.shutdown()
	_, err := db.DB.Exec(`UPDATE idempotency_keys SET created_at = now() - CASE key
		WHEN 'order-30h' THEN interval '30 hours' ELSE interval '100 hours' END`)
	require.NoError(t, err)

	// The instance that keeps keys 24h prunes at its start: the record older
	// than every setting goes, which says its pruning has run.
	pruner := startServe(t, short)
	require.Contains(t, pruner.stderr.String(), `"msg":"API instances disagree on IDEMPOTENCY_KEEP: idempotency keys are kept for the longest"`,
		"the instance says that the settings differ")
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.DB.QueryRow(`SELECT count(*) FROM idempotency_keys WHERE key = 'order-100h'`).Scan(&n))
		return n == 0
	}, 30*time.Second, 10*time.Millisecond, "the 24h instance prunes a record of 100h")

	// The retry, 30h after the write, through an instance that keeps keys 72h.
	again := startServe(t, long)
	b := &api{t: t, base: "http://" + again.HTTPAddr, client: &http.Client{}}
	retry := b.sendOK(http.MethodPost, "/v1/orders", withKey(key, "order-30h"), body)
	require.Equal(t, http.StatusCreated, retry.Status, "%s", retry)
	require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"),
		"the retry within the 72h its instance keeps keys wrote the order again: the 24h instance pruned its record")
	require.Equal(t, written.Raw, retry.Raw)
	var orders int
	require.NoError(t, db.DB.QueryRow(`SELECT count(*) FROM events WHERE type = 'OrderCreated'`).Scan(&orders))
	require.Equal(t, 2, orders, "one order per key")
}
