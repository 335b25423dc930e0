package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/access"
	"hearth/domain/uuid"
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

// keyWrite is a write a test sends with a key revoked since it was cached.
type keyWrite struct {
	method, path string
	body         any
}

// requireRefusedByTheirWrites sends each write with a key of its own, which
// l's server cached by a read and which is revoked since, and requires
// each to be told 401 by its transaction's check rather than by a lookup:
// a key refused is forgotten, so a second write of one key would be
// refused by its lookup whether or not its write checks it.
func requireRefusedByTheirWrites(t *testing.T, a *api, l *limitedAPI, writes []keyWrite) {
	t.Helper()
	requireKeysRefusedByTheirWrites(t, a, l, func() string { return a.newOperatorKey("acme") }, "/v1/customers", writes)
}

// requireKeysRefusedByTheirWrites is requireRefusedByTheirWrites with keys
// made by newKey and cached by a GET of read.
func requireKeysRefusedByTheirWrites(t *testing.T, a *api, l *limitedAPI, newKey func() string, read string, writes []keyWrite) {
	t.Helper()
	keys := make([]string, len(writes))
	for i := range keys {
		keys[i] = newKey()
		require.Equal(t, http.StatusOK, l.from("", keys[i], read).Status)
		a.revokeSecret(keys[i])
	}
	require.Equal(t, http.StatusOK, l.from("", keys[0], read).Status, "a read within the TTL")
	lookups := l.keys.lookups.Load()
	want, got := map[string]int{}, map[string]int{}
	for i, w := range writes {
		r, err := l.send(w.method, w.path, auth(keys[i]), w.body)
		require.NoError(t, err)
		want[w.method+" "+w.path], got[w.method+" "+w.path] = http.StatusUnauthorized, r.Status
		if r.Status == http.StatusUnauthorized {
			requireProblem(t, r, http.StatusUnauthorized, "/problems/unauthenticated")
		}
	}
	require.Equal(t, want, got, "every write refused")
	require.Equal(t, lookups, l.keys.lookups.Load(), "each refused by its write's own check, not by a lookup")
}

// cachedOperator is a server whose key cache vouches for a key it has seen
// (KEY_CACHE_TTL 5s), and send, which sends as a new operator key of
// acme's that works.
func cachedOperator(t *testing.T) (*api, *limitedAPI, func(method, path string, body any) response) {
	t.Helper()
	a := setup(t, pgtest.NewDB(t))
	cached := limitedWith(t, a, Config{KeyCacheTTL: 5 * time.Second}, true)
	key := a.newOperatorKey("acme")
	return a, cached, func(method, path string, body any) response {
		t.Helper()
		r, err := cached.send(method, path, auth(key), body)
		require.NoError(t, err)
		return r
	}
}

// Writes to the reference records (customers, staff, catalog items, staff
// working hours) check their key in their transactions too: a key revoked
// after the key cache vouched for it (within KEY_CACHE_TTL) creates and
// changes nothing, and is told 401, as a write to an aggregate is.
func TestReferenceWritesCheckTheirKeyInTheirTransaction(t *testing.T) {
	t.Parallel()
	a, cached, send := cachedOperator(t)
	r := send(http.MethodPost, "/v1/customers", map[string]any{"name": "Ada"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r)
	customer := r.Body["id"].(string)
	hours := "/v1/staff/" + a.staffA + "/working-hours"
	week := map[string]any{"week": map[string]any{"monday": []any{map[string]any{"start": "09:00", "end": "17:00"}}}}
	r = send(http.MethodPut, hours, week)
	require.Equal(t, http.StatusOK, r.Status, "%s", r)
	count := func(table string) int {
		t.Helper()
		var n int
		require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM `+table+` WHERE merchant_id = $1`, a.merchantA).Scan(&n))
		return n
	}
	customers, staff, items := count("customers"), count("staff"), count("catalog_items")

	requireRefusedByTheirWrites(t, a, cached, []keyWrite{
		{http.MethodPost, "/v1/customers", map[string]any{"name": "Mallory"}},
		{http.MethodPatch, "/v1/customers/" + customer, map[string]any{"name": "Mallory"}},
		{http.MethodPost, "/v1/staff", map[string]any{"name": "Mallory"}},
		{http.MethodPatch, "/v1/staff/" + a.staffA, map[string]any{"name": "Mallory"}},
		{http.MethodPost, "/v1/catalog-items", map[string]any{"name": "Mallory's", "base_price_cents": 100}},
		{http.MethodPut, hours, map[string]any{"week": map[string]any{}}},
	})
	require.Equal(t, []int{customers, staff, items}, []int{count("customers"), count("staff"), count("catalog_items")},
		"the refused writes created nothing")
	var names int
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT (SELECT count(*) FROM customers WHERE name = 'Mallory')
		+ (SELECT count(*) FROM staff WHERE name = 'Mallory')`).Scan(&names))
	require.Zero(t, names, "the refused writes changed nothing")
	var version int
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT version FROM staff_hours WHERE staff_id = $1`, a.staffA).Scan(&version))
	require.Equal(t, 1, version, "the working hours as the key left them")
}

// The merchant's settings and its webhook endpoints' writes (create,
// change, delete, rotate the secret, a test ping, a redelivery) check
// their key in their transactions too: a key revoked after the key cache
// vouched for it (within KEY_CACHE_TTL) changes and queues nothing, and is
// told 401, as a write to an aggregate or a reference record is.
func TestSettingsAndWebhookWritesCheckTheirKeyInTheirTransaction(t *testing.T) {
	t.Parallel()
	a, cached, send := cachedOperator(t)
	r := send(http.MethodPut, "/v1/settings", map[string]any{"time_zone": "Europe/Paris"})
	require.Equal(t, http.StatusOK, r.Status, "%s", r)
	r = send(http.MethodPost, "/v1/webhook-endpoints", map[string]any{"url": "https://203.0.113.9/hook"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r)
	endpoint := "/v1/webhook-endpoints/" + r.Body["id"].(string)
	r = send(http.MethodPost, endpoint+"/test", nil)
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r)
	delivery := endpoint + "/deliveries/" + r.Body["id"].(string)
	// What the writes below would change: the time zone, the endpoints as
	// the merchant left them (the dispatcher changes only its deliveries'
	// rows) and how many deliveries were queued.
	state := func() string {
		t.Helper()
		var s string
		require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT m.time_zone
			|| (SELECT coalesce(string_agg(concat_ws('|', e.id, e.url, e.description, e.enabled, e.version, encode(e.secret_sealed, 'hex')), ',' ORDER BY e.id), '')
				FROM webhook_endpoints e WHERE e.merchant_id = m.id)
			|| (SELECT count(*) FROM webhook_deliveries d WHERE d.merchant_id = m.id)
			FROM merchants m WHERE m.id = $1`, a.merchantA).Scan(&s))
		return s
	}
	before := state()
	requireRefusedByTheirWrites(t, a, cached, []keyWrite{
		{http.MethodPut, "/v1/settings", map[string]any{"time_zone": "Asia/Tokyo"}},
		{http.MethodPost, "/v1/webhook-endpoints", map[string]any{"url": "https://203.0.113.10/mallory"}},
		{http.MethodPatch, endpoint, map[string]any{"description": "Mallory"}},
		{http.MethodPost, endpoint + "/rotate-secret", nil},
		{http.MethodPost, endpoint + "/test", nil},
		{http.MethodPost, delivery + "/redeliver", nil},
		{http.MethodDelete, endpoint, nil},
	})
	require.Equal(t, before, state(), "the refused writes changed and queued nothing")
}

// limitedDone is limitedWith(t, a, cfg, true) whose server reports on done
// each POST it has finished handling.
func limitedDone(t *testing.T, a *api, cfg Config) (*limitedAPI, <-chan struct{}) {
	t.Helper()
	done := make(chan struct{}, 100)
	l := limitedServed(t, a, cfg, true, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r)
			if r.Method == http.MethodPost {
				done <- struct{}{}
			}
		})
	})
	return l, done
}

// startWrite opens a connection to l's server and sends the headers of a
// POST to path with key, announcing a body of 100 bytes and Expect:
// 100-continue. It returns the connection and the first status line the
// server answers; after a 100 Continue (the handler began reading the
// body, so the request was admitted) it sends the body's first bytes only.
func startWrite(t *testing.T, l *limitedAPI, key, path string) (net.Conn, string) {
	t.Helper()
	u, err := url.Parse(l.base)
	require.NoError(t, err)
	conn, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n", path, u.Host, key)
	require.NoError(t, err)
	line, err := bufio.NewReader(conn).ReadString('\n')
	require.NoError(t, err)
	line = strings.TrimSpace(line)
	if strings.Contains(line, " 100 ") {
		_, err = conn.Write([]byte(`{"customer_id":`)) // and never the rest
		require.NoError(t, err)
	}
	return conn, line
}

// A key is looked up before its write is admitted (and spends nothing of
// its merchant's budgets if it no longer works) unless it was found working
// a moment ago: a key revoked a while after its last use is refused
// before it runs. A write with Expect: 100-continue is always looked up
// first, so a key that no longer works is told 401 at once, as an unknown
// key is, and not asked for its body.
func TestRevokedKeysAreRefusedBeforeTheyAreAdmitted(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	order := map[string]any{"customer_id": customer, "amount_cents": 4200}
	l := limitedWith(t, a, Config{}, true)
	lookups := func() int32 { return l.keys.lookups.Load() }
	r, err := l.send(http.MethodPost, "/v1/orders", auth(a.opA), order)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r)
	a.revokeSecret(a.opA)

	l.advance(time.Minute)
	r, err = l.send(http.MethodPost, "/v1/orders", auth(a.opA), order)
	require.NoError(t, err)
	requireProblem(t, r, http.StatusUnauthorized, "/problems/unauthenticated")
	require.Equal(t, int32(2), lookups(), "looked up first: its key was last found working a minute ago")

	second := a.newOperatorKey("acme")
	r, err = l.send(http.MethodPost, "/v1/orders", auth(second), order)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r)
	a.revokeSecret(second)
	_, unknown := startWrite(t, l, unknownKey, "/v1/orders")
	require.True(t, strings.HasPrefix(unknown, "HTTP/1.1 401"), "%q", unknown)
	_, revoked := startWrite(t, l, second, "/v1/orders")
	require.Equal(t, unknown, revoked, "a write with Expect is looked up first")
}

// A key refused, or whose request ended before it was checked (its client
// hung up), is forgotten: it does not spend its merchant's budget again.
func TestARevokedKeyThatHangsUpSpendsItsMerchantsBudgetOnce(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	const burst = 3
	l, done := limitedDone(t, a, Config{MerchantRPS: 0.001, MerchantBurst: burst})
	second := a.newOperatorKey("acme")
	r, err := l.send(http.MethodPost, "/v1/orders", auth(a.opA), map[string]any{"customer_id": customer, "amount_cents": 4200})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r)
	<-done

	a.revokeSecret(a.opA)
	for range 5 {
		u, err := url.Parse(l.base)
		require.NoError(t, err)
		conn, err := net.Dial("tcp", u.Host)
		require.NoError(t, err)
		_, err = fmt.Fprintf(conn, "POST /v1/orders HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{", u.Host, a.opA)
		require.NoError(t, err)
		require.NoError(t, conn.Close()) // the client hangs up before the body ends
		<-done
	}
	legit := l.from("", second, "/v1/customers")
	require.Equal(t, http.StatusOK, legit.Status, "the revoked key spent the merchant's budget once at most: %s", legit)
}

// A worker key whose staff member was deactivated, and an expired key,
// known to the instance, are refused by their write's own check, which
// writes nothing.
func TestDeactivatedWorkersAndExpiredKeysAreRefusedInTheirWrite(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	own := a.createOrder(a.opA, customer, 100)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+own+"/assignment", a.opA,
		map[string]any{"staff_id": a.staffA, "start_at": "2030-06-01T10:00:00Z", "end_at": "2030-06-01T12:00:00Z"})
	schedule := a.crmSchedule(a.opA, own).Body["id"].(string)
	l := limitedWith(t, a, Config{}, true)
	lookups := func() int32 { return l.keys.lookups.Load() }

	require.Equal(t, http.StatusOK, l.from("", a.worker, "/v1/schedules/"+schedule).Status) // known now
	_, err := a.dbs.es.DB.ExecContext(t.Context(), `UPDATE staff SET active = false WHERE id = $1`, a.staffA)
	require.NoError(t, err)
	before := lookups()
	r, err := l.send(http.MethodPost, "/v1/schedules/"+schedule+"/status", auth(a.worker), map[string]any{"status": "in_service"})
	require.NoError(t, err)
	requireProblem(t, r, http.StatusUnauthorized, "/problems/unauthenticated")
	require.Equal(t, before, lookups(), "refused by the transaction's check")

	expiring := a.newOperatorKey("acme")
	r, err = l.send(http.MethodPost, "/v1/orders", auth(expiring), map[string]any{"customer_id": customer, "amount_cents": 1})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r)
	_, err = a.dbs.es.DB.ExecContext(t.Context(),
		`UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE key_hash = sha256(convert_to($1, 'UTF8'))`, expiring)
	require.NoError(t, err)
	created := a.countEvents(a.merchantA, "OrderCreated")
	before = lookups()
	r, err = l.send(http.MethodPost, "/v1/orders", auth(expiring), map[string]any{"customer_id": customer, "amount_cents": 1})
	require.NoError(t, err)
	requireProblem(t, r, http.StatusUnauthorized, "/problems/unauthenticated")
	require.Equal(t, before, lookups(), "refused by the transaction's check")
	require.Equal(t, created, a.countEvents(a.merchantA, "OrderCreated"))
}

// A write with an Idempotency-Key is looked up first, through the key cache
// like any request; its transaction checks the key all the same, so a key
// revoked while the cache still vouches for it writes nothing and gets
// 401. Its claim on the idempotency key goes: another key of its scope
// retrying the same request runs it.
func TestRevokedKeysWriteNothingWithAnIdempotencyKey(t *testing.T) {
	t.Parallel()
	a := setupConfigured(t, pgtest.NewDB(t), func(cfg *Config) { cfg.KeyCacheTTL = time.Minute }, nil)
	customer := a.createCustomer(a.opA, "Ada")
	order := map[string]any{"customer_id": customer, "amount_cents": 100}
	revoked := a.newOperatorKey("acme")
	a.must(http.StatusCreated, http.MethodPost, "/v1/orders", revoked, order) // the key is cached now
	a.revokeSecret(revoked)

	before := a.events("")
	h := auth(revoked)
	key := uuid.New()
	h.Set("Idempotency-Key", key)
	r, err := a.send(http.MethodPost, "/v1/orders", h, order)
	require.NoError(t, err)
	requireProblem(t, r, http.StatusUnauthorized, "/problems/unauthenticated")
	require.Equal(t, before, a.events(""), "a revoked key writes nothing, whatever the cache says")

	h = auth(a.opA)
	h.Set("Idempotency-Key", key)
	r, err = a.send(http.MethodPost, "/v1/orders", h, order)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, r.Status, "the refused attempt's claim is released: %s", r)
}

// An erasure (of a customer, of a staff member) checks its key in its
// first pass's transaction, before the subject's lock: a key revoked after
// the key cache vouched for it (within KEY_CACHE_TTL) erases nothing,
// records no second pass and no audit entry, and is told 401, as any other
// write is.
func TestErasuresCheckTheirKeyInTheirTransaction(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	cached := limitedWith(t, a, Config{KeyCacheTTL: 5 * time.Second}, true)
	key := a.newOperatorKey("acme")
	r, err := cached.send(http.MethodPost, "/v1/customers", auth(key), map[string]any{"name": "Ada", "email": "ada@example.com"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r)
	customer := r.Body["id"].(string)
	// What an erasure changes, whichever pass: the subjects' rows, their
	// data keys, the records of erasures and of second passes, the audit.
	state := func() string {
		t.Helper()
		var s string
		require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT concat_ws('|',
			(SELECT concat_ws(',', name, email, erased_at) FROM customers WHERE id = $1),
			(SELECT concat_ws(',', name, active, erased_at) FROM staff WHERE id = $2),
			(SELECT count(*) FROM data_keys WHERE subject_id IN ($1, $2)),
			(SELECT count(*) FROM erased_subjects WHERE subject_id IN ($1, $2)),
			(SELECT count(*) FROM erasure_second_passes WHERE subject_id IN ($1, $2)),
			(SELECT count(*) FROM admin_audit WHERE target IN ('customer/' || $1, 'staff_member/' || $2)))`,
			customer, a.staffA).Scan(&s))
		return s
	}
	before := state()
	requireRefusedByTheirWrites(t, a, cached, []keyWrite{
		{http.MethodPost, "/v1/customers/" + customer + "/erase", map[string]any{"confirm": customer}},
		{http.MethodPost, "/v1/staff/" + a.staffA + "/erase", map[string]any{"confirm": a.staffA}},
	})
	require.Equal(t, before, state(), "the refused erasures erased and recorded nothing")
}

// The admin key writes (create, revoke, rotate) check their key in their
// transactions too: an admin key revoked after the key cache vouched for
// it (within KEY_CACHE_TTL) creates, revokes and rotates nothing, records
// no audit entry, and is told 401.
func TestAdminKeyWritesCheckTheirKeyInTheirTransaction(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	cached := limitedWith(t, a, Config{KeyCacheTTL: 5 * time.Second}, true)
	target, err := a.w.refdata.CreateKey(t.Context(), "acme", access.Operator, "")
	require.NoError(t, err)
	state := func() string {
		t.Helper()
		var s string
		require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT concat_ws('|',
			(SELECT count(*) FROM api_keys),
			(SELECT concat_ws(',', revoked_at, expires_at, replaced_by) FROM api_keys WHERE id = $1),
			(SELECT count(*) FROM admin_audit))`, target.ID).Scan(&s))
		return s
	}
	newAdminKey := func() string {
		k, err := a.w.refdata.CreateKey(t.Context(), "", access.Admin, "")
		require.NoError(t, err)
		return k.Secret
	}
	// The refused keys are made (their creation audited) before the state
	// is read.
	writes := []keyWrite{
		{http.MethodPost, "/admin/keys", map[string]any{"role": "operator", "merchant": "acme", "name": "mallory"}},
		{http.MethodPost, "/admin/keys/" + target.ID + "/revoke", nil},
		{http.MethodPost, "/admin/keys/" + target.ID + "/rotate", map[string]any{"grace": "24h"}},
	}
	secrets := make([]string, len(writes))
	for i := range secrets {
		secrets[i] = newAdminKey()
	}
	next := 0
	before := state()
	requireKeysRefusedByTheirWrites(t, a, cached, func() string { next++; return secrets[next-1] }, "/admin/keys", writes)
	require.Equal(t, before, state(), "the refused writes created, revoked, rotated and recorded nothing")
}
