package httpport

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app"
	"hearth/app/access"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/reference"
)

// countedKeys knows one admin key and counts its lookups.
type countedKeys struct{ lookups atomic.Int64 }

func (c *countedKeys) Authenticate(_ context.Context, secret string) (access.Principal, error) {
	c.lookups.Add(1)
	if secret == "hk_admin" {
		return access.Principal{KeyID: "a1", Role: access.Admin}, nil
	}
	return access.Principal{}, apperr.ErrNotFound
}

// A flood of /readyz costs neither a database ping per request nor a key
// lookup per unknown key.
func TestReadyzFloodIsCheap(t *testing.T) {
	t.Parallel()
	var checks atomic.Int64
	keys := &countedKeys{}
	srv, err := NewHandler(Config{Auth: keys, APIEnabled: true,
		Limits: Limits{UnknownKeyRate: 1, UnknownKeyBurst: 5},
		Ready: func(context.Context) (map[string]any, error) {
			checks.Add(1)
			return map[string]any{"mode": "all"}, nil
		}})
	require.NoError(t, err)
	get := func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
		req.RemoteAddr = "192.0.2.1:1234"
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec
	}
	const n = 100
	for range n {
		rec := get("hk_unknown")
		require.Equal(t, http.StatusOK, rec.Code)
		require.JSONEq(t, `{"status":"ready"}`, rec.Body.String(), "an unknown key sees the status only")
	}
	require.Less(t, checks.Load(), int64(n/2), "readiness checks are shared, not one per request")
	require.EqualValues(t, 5, keys.lookups.Load(), "the address's budget of unknown keys bounds the lookups")

	// The admin key is looked up once, then cached; another address still
	// has its budget.
	req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
	req.RemoteAddr = "198.51.100.7:1"
	req.Header.Set("Authorization", "Bearer hk_admin")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	require.Contains(t, rec.Body.String(), `"mode":"all"`, "an admin key sees the details")
}

// A key that authenticated lately is looked up again after its cache entry
// expires even from an address whose budget of unknown keys a flood has
// spent: the flood cannot lock out a real client behind the same address.
// Once the key stops authenticating, it is an unknown key like any other.
func TestKnownKeyOutlivesAFloodFromItsAddress(t *testing.T) {
	t.Parallel()
	keys := &revocableKeys{valid: map[string]bool{"hk_good": true}}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var clock atomic.Pointer[time.Time]
	clock.Store(&now)
	srv, err := NewHandler(Config{Auth: keys, APIEnabled: true, KeyCacheTTL: 5 * time.Second,
		Limits: Limits{UnknownKeyRate: 1, UnknownKeyBurst: 3},
		Now:    func() time.Time { return *clock.Load() },
		App:    readOnlyApp(t)})
	require.NoError(t, err)
	get := func(key string) int {
		req := httptest.NewRequest(http.MethodGet, "/v1/customers", nil)
		req.RemoteAddr = "192.0.2.1:1234"
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec.Code
	}
	require.Equal(t, http.StatusOK, get("hk_good"))
	for range 3 {
		require.Equal(t, http.StatusUnauthorized, get("hk_made_up"))
	}
	require.Equal(t, http.StatusTooManyRequests, get("hk_made_up"), "the address's budget is spent")

	later := now.Add(6 * time.Second) // past the cache entry; the budget is full again (3)
	clock.Store(&later)
	for range 3 {
		require.Equal(t, http.StatusUnauthorized, get("hk_made_up"))
	}
	require.Equal(t, http.StatusTooManyRequests, get("hk_made_up"))
	require.Equal(t, http.StatusOK, get("hk_good"), "looked up again, despite the spent budget")

	keys.revoke("hk_good")
	evenLater := later.Add(6 * time.Second)
	clock.Store(&evenLater)
	for range 3 {
		require.Equal(t, http.StatusUnauthorized, get("hk_made_up"))
	}
	require.Equal(t, http.StatusUnauthorized, get("hk_good"), "revoked: looked up (it was known) and refused")
	require.Equal(t, http.StatusTooManyRequests, get("hk_good"), "then no longer known: the budget applies")
}

type revocableKeys struct {
	mu    sync.Mutex
	valid map[string]bool
}

func (k *revocableKeys) revoke(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.valid, key)
}

func (k *revocableKeys) Authenticate(_ context.Context, secret string) (access.Principal, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.valid[secret] {
		return access.Principal{KeyID: "k-" + secret, MerchantID: "m1", Role: access.Operator}, nil
	}
	return access.Principal{}, apperr.ErrNotFound
}

// readOnlyApp serves GET /v1/customers (an empty list).
func readOnlyApp(t *testing.T) app.Application {
	t.Helper()
	q, err := query.NewRecords[reference.Customer](blockingCustomers{hold: new(atomic.Int32)})
	require.NoError(t, err)
	var a app.Application
	a.Queries.Customers = q
	return a
}

// expiringKeys knows one key, which works until its expiry (as the key
// store's lookup decides, on the server's clock).
type expiringKeys struct {
	now     func() time.Time
	expires time.Time
}

func (k expiringKeys) Authenticate(_ context.Context, secret string) (access.Principal, error) {
	if secret != "hk_expiring" || !k.now().Before(k.expires) {
		return access.Principal{}, apperr.ErrNotFound
	}
	return access.Principal{KeyID: "k-expiring", MerchantID: "m1", Role: access.Operator, ExpiresAt: k.expires}, nil
}

// A key stops working at its expiry, as docs/operations.md says, however
// long the key cache keeps it: a key looked up a moment before it expires
// is not served from the cache after.
func TestAKeyStopsWorkingAtItsExpiryWhateverTheCache(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var clock atomic.Pointer[time.Time]
	clock.Store(&now)
	read := func() time.Time { return *clock.Load() }
	srv, err := NewHandler(Config{Auth: expiringKeys{now: read, expires: now.Add(time.Second)}, APIEnabled: true,
		KeyCacheTTL: time.Minute, Now: read, App: readOnlyApp(t)})
	require.NoError(t, err)
	get := func() int {
		req := httptest.NewRequest(http.MethodGet, "/v1/customers", nil)
		req.RemoteAddr = "192.0.2.1:1234"
		req.Header.Set("Authorization", "Bearer hk_expiring")
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec.Code
	}
	require.Equal(t, http.StatusOK, get())
	later := now.Add(2 * time.Second) // past its expiry, well within the cache's minute
	clock.Store(&later)
	require.Equal(t, http.StatusUnauthorized, get(), "expired a second ago")
}

// A /readyz caller that goes away mid-check (a load balancer's probe timing
// out) does not make the shared check fail for the probes after it: the
// check is the instance's, not the caller's.
func TestReadyzCallerThatLeavesFailsNoOtherProbe(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	srv, err := NewHandler(Config{Auth: &countedKeys{}, APIEnabled: true, Now: func() time.Time { return now },
		Ready: func(ctx context.Context) (map[string]any, error) {
			if err := ctx.Err(); err != nil { // as a database ping under a cancelled context fails
				return nil, err
			}
			return map[string]any{}, nil
		}})
	require.NoError(t, err)
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	srv.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(gone, http.MethodGet, "/readyz", nil))
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil)) // the same instant: the shared check
	require.Equal(t, http.StatusOK, rec.Code, "%s", rec.Body)
}
