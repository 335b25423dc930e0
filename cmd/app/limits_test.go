package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/access"
	"hearth/internal/pgtest"
	httpport "hearth/ports/http"
)

// countingKeys counts the lookups that reach the key store.
type countingKeys struct {
	next    httpport.Authenticator
	lookups atomic.Int32
}

func (c *countingKeys) Authenticate(ctx context.Context, secret string) (access.Principal, error) {
	c.lookups.Add(1)
	return c.next.Authenticate(ctx, secret)
}

// checkingKeys is countingKeys that also makes the key check a write's
// transaction runs (refdata.Store.KeyCheck), as the key store serve wires.
type checkingKeys struct {
	*countingKeys
	checks func(p access.Principal, secret string) *access.KeyCheck
}

func (c checkingKeys) KeyCheck(p access.Principal, secret string) *access.KeyCheck {
	return c.checks(p, secret)
}

// limitedAPI is a's Hearth served again with fair-share settings, a
// counting key store, a clock that moves only when told, and a record of
// KeyUsed.
type limitedAPI struct {
	*api
	keys *countingKeys

	mu   sync.Mutex
	now  time.Time
	used []string
}

func (l *limitedAPI) clock() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.now
}

func (l *limitedAPI) advance(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now = l.now.Add(d)
}

func (l *limitedAPI) keysUsed() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.used...)
}

// limited serves a's application behind a handler with cfg's limits, key
// cache and trusted proxies (the rest of cfg is not used).
func limited(t *testing.T, a *api, cfg Config) *limitedAPI {
	t.Helper()
	return limitedWith(t, a, cfg, false)
}

// limitedWith is limited whose key store, when checkInWrite, makes the key
// checks that writes to aggregates run in their transactions.
func limitedWith(t *testing.T, a *api, cfg Config, checkInWrite bool) *limitedAPI {
	t.Helper()
	return limitedServed(t, a, cfg, checkInWrite, func(h http.Handler) http.Handler { return h })
}

// limitedServed is limitedWith whose handler is served through wrap.
func limitedServed(t *testing.T, a *api, cfg Config, checkInWrite bool, wrap func(http.Handler) http.Handler) *limitedAPI {
	t.Helper()
	l := &limitedAPI{keys: &countingKeys{next: a.w.refdata}, now: time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)}
	var keys httpport.Authenticator = l.keys
	if checkInWrite {
		keys = checkingKeys{countingKeys: l.keys, checks: a.w.refdata.KeyCheck}
	}
	handler, err := httpport.NewHandler(httpport.Config{
		App: a.w.app, Auth: keys, APIEnabled: true, Now: l.clock, Erasures: a.w.erasures, Keys: a.w.keys,
		Log:    slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		Limits: cfg.httpLimits(), TrustedProxies: cfg.TrustedProxies, KeyCacheTTL: cfg.KeyCacheTTL,
		KeyUsed: func(keyID string) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.used = append(l.used, keyID)
		},
	})
	require.NoError(t, err)
	srv := httptest.NewServer(wrap(handler))
	t.Cleanup(srv.Close)
	served := *a
	served.base, served.client = srv.URL, srv.Client()
	l.api = &served
	return l
}

// from sends GET path with key as if from the client address behind the
// X-Forwarded-For hops xff ("" sends no header).
func (l *limitedAPI) from(xff, key, path string) response {
	l.t.Helper()
	h := auth(key)
	if xff != "" {
		h.Set("X-Forwarded-For", xff)
	}
	r, err := l.send(http.MethodGet, path, h, nil)
	require.NoError(l.t, err)
	return r
}

func (a *api) newOperatorKey(merchantName string) string {
	a.t.Helper()
	k, err := a.w.refdata.CreateKey(a.t.Context(), merchantName, access.Operator, "")
	require.NoError(a.t, err)
	return k.Secret
}

// requireRateLimited checks a 429 naming the limit, with Retry-After in
// whole seconds and the RateLimit-* headers.
func requireRateLimited(t *testing.T, r response, limit string, retryAfter int) {
	t.Helper()
	requireProblem(t, r, http.StatusTooManyRequests, "/problems/rate-limited")
	require.Equal(t, limit, r.Body["limit"], "%s", r)
	require.Equal(t, strconv.Itoa(retryAfter), r.Header.Get("Retry-After"), "%s", r)
	if limit != "in-flight" {
		require.Equal(t, "0", r.Header.Get("RateLimit-Remaining"), "%s", r)
		require.NotEmpty(t, r.Header.Get("RateLimit-Limit"), "%s", r)
		require.NotEmpty(t, r.Header.Get("RateLimit-Reset"), "%s", r)
	}
}

const unknownKey = "hk_0000000000000000000000000000000000000000000"

// A key's bucket: each answer tells the limit, what remains and when the
// bucket is full again; past the burst the key is told 429 with
// Retry-After, while another key of the same merchant goes on, until the
// bucket refills.
func TestLimitPerKey(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	l := limited(t, a, Config{KeyRPS: 0.01, KeyBurst: 3}) // a token every 100 s
	other := a.newOperatorKey("acme")

	for i := range 3 {
		r := l.from("", a.opA, "/v1/customers")
		require.Equal(t, http.StatusOK, r.Status, "%s", r)
		require.Equal(t, "3", r.Header.Get("RateLimit-Limit"))
		require.Equal(t, strconv.Itoa(2-i), r.Header.Get("RateLimit-Remaining"))
		require.Equal(t, strconv.Itoa(100*(i+1)), r.Header.Get("RateLimit-Reset"), "seconds until the bucket is full")
		require.Equal(t, `"key";q=3;w=300`, r.Header.Get("RateLimit-Policy"))
		require.Equal(t, `"key";r=`+strconv.Itoa(2-i)+`;t=`+strconv.Itoa(100*(i+1)), r.Header.Get("RateLimit"))
	}
	r := l.from("", a.opA, "/v1/customers")
	requireRateLimited(t, r, "key", 100)
	require.Equal(t, "3", r.Header.Get("RateLimit-Limit"))
	require.Equal(t, "300", r.Header.Get("RateLimit-Reset"))
	require.Contains(t, r.Body["detail"], "API key")

	require.Equal(t, http.StatusOK, l.from("", other, "/v1/customers").Status, "another key has its own bucket")
	l.advance(100 * time.Second)
	require.Equal(t, http.StatusOK, l.from("", a.opA, "/v1/customers").Status, "a token came back")
	requireRateLimited(t, l.from("", a.opA, "/v1/customers"), "key", 100)
}

// A merchant's budget is shared by its keys; another merchant's is not
// touched.
func TestLimitPerMerchant(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	l := limited(t, a, Config{KeyRPS: 1000, KeyBurst: 1000, MerchantRPS: 0.01, MerchantBurst: 4})
	second := a.newOperatorKey("acme")

	for _, key := range []string{a.opA, second, a.opA, second} {
		r := l.from("", key, "/v1/customers")
		require.Equal(t, http.StatusOK, r.Status, "%s", r)
		require.Equal(t, "1000", r.Header.Get("RateLimit-Limit"), "success answers tell the key's bucket")
	}
	for _, key := range []string{second, a.opA} {
		r := l.from("", key, "/v1/customers")
		requireRateLimited(t, r, "merchant", 100)
		require.Equal(t, "4", r.Header.Get("RateLimit-Limit"), "a 429 tells the bucket that refused")
		require.Contains(t, r.Body["detail"], "merchant")
	}
	for range 4 {
		require.Equal(t, http.StatusOK, l.from("", a.opB, "/v1/customers").Status, "merchant B is not held back by A")
	}
}

// Unknown keys spend their client address's budget; once it is spent,
// a key from that address that is not cached is answered 429 without a
// lookup, while cached keys and other addresses go on.
func TestLimitUnknownKeysPerAddress(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	l := limited(t, a, Config{UnknownKeyRPS: 0.01, UnknownKeyBurst: 3, KeyCacheTTL: time.Minute,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}})
	flooder, other := "203.0.113.7", "203.0.113.8"

	require.Equal(t, http.StatusOK, l.from(flooder, a.opA, "/v1/customers").Status)
	for range 3 {
		requireProblem(t, l.from(flooder, unknownKey, "/v1/customers"), http.StatusUnauthorized, "/problems/unauthenticated")
	}
	require.Equal(t, int32(4), l.keys.lookups.Load())
	for range 5 {
		r := l.from(flooder, unknownKey, "/v1/customers")
		requireRateLimited(t, r, "client-address", 100)
		require.Contains(t, r.Body["detail"], "client address")
	}
	require.Equal(t, int32(4), l.keys.lookups.Load(), "refused without a lookup")

	require.Equal(t, http.StatusOK, l.from(flooder, a.opA, "/v1/customers").Status, "a cached key still works from there")
	requireRateLimited(t, l.from(flooder, a.opB, "/v1/customers"), "client-address", 100) // not cached: not looked up
	require.Equal(t, int32(4), l.keys.lookups.Load())

	requireProblem(t, l.from(other, unknownKey, "/v1/customers"), http.StatusUnauthorized, "/problems/unauthenticated")
	require.Equal(t, http.StatusOK, l.from(other, a.opB, "/v1/customers").Status, "another address has its own budget")
	require.Equal(t, int32(6), l.keys.lookups.Load())

	l.advance(100 * time.Second)
	require.Equal(t, http.StatusOK, l.from(flooder, a.opB, "/v1/customers").Status, "the budget refills")
}

// X-Forwarded-For names the client only when the peer is a trusted proxy,
// and then the right-most hop that is not a trusted proxy counts, not what
// the client wrote on the left.
func TestLimitForwardedForOnlyFromTrustedProxies(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	budget := Config{UnknownKeyRPS: 0.01, UnknownKeyBurst: 2}
	untrusting := limited(t, a, budget)
	trusting := budget
	trusting.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}
	proxied := limited(t, a, trusting)

	for _, xff := range []string{"203.0.113.1", "203.0.113.2"} {
		requireProblem(t, untrusting.from(xff, unknownKey, "/v1/orders"), http.StatusUnauthorized, "/problems/unauthenticated")
	}
	requireRateLimited(t, untrusting.from("203.0.113.3", unknownKey, "/v1/orders"), "client-address", 100)
	require.Equal(t, int32(2), untrusting.keys.lookups.Load(), "a spoofed header does not buy a new budget")

	for _, xff := range []string{"198.51.100.1, 203.0.113.9", "198.51.100.2, 203.0.113.9"} {
		requireProblem(t, proxied.from(xff, unknownKey, "/v1/orders"), http.StatusUnauthorized, "/problems/unauthenticated")
	}
	requireRateLimited(t, proxied.from("203.0.113.9", unknownKey, "/v1/orders"), "client-address", 100)
	requireRateLimited(t, proxied.from("203.0.113.9, 127.0.0.1", unknownKey, "/v1/orders"), "client-address", 100)
	requireProblem(t, proxied.from("203.0.113.9, 203.0.113.10", unknownKey, "/v1/orders"), http.StatusUnauthorized, "/problems/unauthenticated")
	require.Equal(t, int32(3), proxied.keys.lookups.Load())
}

// A known key is cached for KEY_CACHE_TTL: no lookup while it is, KeyUsed
// on every request, and a revoked key stops working once its entry expires.
func TestLimitKeyCache(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	l := limited(t, a, Config{KeyCacheTTL: 5 * time.Second})

	for range 3 {
		require.Equal(t, http.StatusOK, l.from("", a.opA, "/v1/customers").Status)
	}
	require.Equal(t, int32(1), l.keys.lookups.Load(), "one lookup, then the cache")
	require.Equal(t, []string{a.opAKeyID, a.opAKeyID, a.opAKeyID}, l.keysUsed())

	_, err := a.dbs.es.DB.ExecContext(t.Context(), `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, a.opAKeyID)
	require.NoError(t, err)
	l.advance(4 * time.Second)
	require.Equal(t, http.StatusOK, l.from("", a.opA, "/v1/customers").Status, "cached until the entry expires")
	l.advance(time.Second)
	requireProblem(t, l.from("", a.opA, "/v1/customers"), http.StatusUnauthorized, "/problems/unauthenticated")
	require.Equal(t, int32(2), l.keys.lookups.Load())
	require.Len(t, l.keysUsed(), 4, "a refused key was not used")

	off := limited(t, a, Config{})
	for range 2 {
		require.Equal(t, http.StatusOK, off.from("", a.opB, "/v1/customers").Status)
	}
	require.Equal(t, int32(2), off.keys.lookups.Load(), "KEY_CACHE_TTL=0 looks every key up")
}

// A request refused by the merchant's limit spends nothing of its key's:
// a key of a merchant over budget is served once the merchant's bucket
// refills, not refused by a limit it never passed.
func TestARequestRefusedByOneLimitSpendsNoOther(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	// A key: 2 requests, a token every 100 s; the merchant: 1, a token every 10 s.
	l := limited(t, a, Config{KeyRPS: 0.01, KeyBurst: 2, MerchantRPS: 0.1, MerchantBurst: 1})
	second := a.newOperatorKey("acme") // another key of merchant A

	require.Equal(t, http.StatusOK, l.from("", a.opA, "/v1/customers").Status, "opA spends the merchant's one token")
	for range 2 {
		requireRateLimited(t, l.from("", second, "/v1/customers"), "merchant", 10)
	}
	l.advance(10 * time.Second) // the merchant's bucket has a token again

	// second has not been served once; its key's bucket (burst 2) should
	// be full, and the merchant has a token.
	r := l.from("", second, "/v1/customers")
	require.Equal(t, http.StatusOK, r.Status,
		"a key never served is not refused by its own limit: its refused requests spent none of its budget: %s (Retry-After %s)",
		r, r.Header.Get("Retry-After"))
}
