package httpport

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
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

// fakeKeys authenticates the secrets it knows; lookups counts the calls.
// The first hold lookups wait for gate to close (after telling entered);
// any further one does not wait, so a test that lets too many through
// fails instead of hanging.
type fakeKeys struct {
	keys    map[string]access.Principal
	lookups atomic.Int32
	hold    atomic.Int32
	entered chan struct{}
	gate    chan struct{}
}

func (f *fakeKeys) Authenticate(ctx context.Context, secret string) (access.Principal, error) {
	f.lookups.Add(1)
	if f.hold.Add(-1) >= 0 {
		f.entered <- struct{}{}
		<-f.gate
	}
	if p, ok := f.keys[secret]; ok {
		return p, nil
	}
	return access.Principal{}, apperr.ErrNotFound
}

// blockingCustomers is a customer read model that holds the first hold
// requests of merchant "m1" in flight (telling entered) until release
// closes; every other request finds nothing at once.
type blockingCustomers struct {
	hold    *atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func (b blockingCustomers) Get(ctx context.Context, merchantID, id string) (reference.Customer, error) {
	if merchantID == "m1" && b.hold.Add(-1) >= 0 {
		b.entered <- struct{}{}
		<-b.release
	}
	return reference.Customer{}, apperr.ErrNotFound
}

func (b blockingCustomers) List(context.Context, string, string, query.Page) (query.List[reference.Customer], error) {
	return query.List[reference.Customer]{}, nil
}

func operators(merchants ...string) *fakeKeys {
	f := &fakeKeys{keys: map[string]access.Principal{}}
	for _, m := range merchants {
		f.keys["key-"+m] = access.Principal{KeyID: "id-" + m, MerchantID: m, Role: access.Operator}
	}
	return f
}

func get(h http.Handler, path, key, remoteAddr string, header http.Header) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = remoteAddr
	for name, v := range header {
		req.Header[name] = v
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func requireRateLimited(t *testing.T, rec *httptest.ResponseRecorder, limit string) {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, rec.Code, rec.Body.String())
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	var p problem
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
	require.Equal(t, "/problems/rate-limited", p.Type)
	require.Equal(t, limit, p.Limit, p.Detail)
	retry, err := strconv.Atoi(rec.Header().Get("Retry-After"))
	require.NoError(t, err, "Retry-After is whole seconds")
	require.GreaterOrEqual(t, retry, 1)
}

const customerPath = "/v1/customers/8f3c2a53-5b0e-4a59-9d4c-0d6a1f1e2b3c"

// A merchant's requests in flight are capped: with two held in the
// handler, its third is 429 at once while another merchant is served; when
// they end, it is served again.
func TestLimitMerchantInFlight(t *testing.T) {
	t.Parallel()
	customers := blockingCustomers{hold: new(atomic.Int32), entered: make(chan struct{}), release: make(chan struct{})}
	customers.hold.Store(2)
	q, err := query.NewRecords[reference.Customer](customers)
	require.NoError(t, err)
	var a app.Application
	a.Queries.Customers = q
	h, err := NewHandler(Config{App: a, Auth: operators("m1", "m2"), APIEnabled: true,
		Limits: Limits{MerchantInFlight: 2}})
	require.NoError(t, err)

	var wg sync.WaitGroup
	held := make([]int, 2)
	for i := range held {
		wg.Go(func() { held[i] = get(h, customerPath, "key-m1", "192.0.2.1:1000", nil).Code })
		<-customers.entered // in the handler, holding its slot
	}
	requireRateLimited(t, get(h, customerPath, "key-m1", "192.0.2.1:1000", nil), limitInFlight)
	require.Equal(t, http.StatusNotFound, get(h, customerPath, "key-m2", "192.0.2.2:1000", nil).Code,
		"another merchant is not held back")

	close(customers.release)
	wg.Wait()
	require.Equal(t, []int{http.StatusNotFound, http.StatusNotFound}, held)
	require.Equal(t, http.StatusNotFound, get(h, customerPath, "key-m1", "192.0.2.1:1000", nil).Code,
		"the slots are given back")
}

// Lookups under way count against an address's budget of unknown keys, so
// concurrent requests cannot overdraw it: with a burst of 2 and two
// lookups waiting, a third request is 429 without a lookup.
func TestLimitUnknownKeyLookupsInFlight(t *testing.T) {
	t.Parallel()
	keys := operators("m1")
	keys.entered, keys.gate = make(chan struct{}), make(chan struct{})
	keys.hold.Store(2)
	h, err := NewHandler(Config{Auth: keys, APIEnabled: true, Limits: Limits{UnknownKeyRate: 0.001, UnknownKeyBurst: 2}})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { get(h, "/v1/orders", "nobody", "192.0.2.1:1000", nil) })
		<-keys.entered
	}
	requireRateLimited(t, get(h, "/v1/orders", "nobody", "192.0.2.1:1000", nil), limitClientAddress)
	require.Equal(t, int32(2), keys.lookups.Load(), "no lookup for the refused request")
	close(keys.gate)
	wg.Wait()
}

// An IPv6 client's unknown keys count per /64 and per /48 too: a site that
// owns a /48 gets siteShare budgets, not one per /64 it can draw from.
func TestLimitUnknownKeysPerSite(t *testing.T) {
	t.Parallel()
	h, err := NewHandler(Config{Auth: operators(), APIEnabled: true, Limits: Limits{UnknownKeyRate: 0.001, UnknownKeyBurst: 2}})
	require.NoError(t, err)
	from := func(subnet int) string { return fmt.Sprintf("[2001:db8:7:%x::1]:443", subnet) }
	for i := range 2 * siteShare {
		rec := get(h, "/v1/orders", "nobody", from(i/2), nil)
		require.Equal(t, http.StatusUnauthorized, rec.Code, "lookup %d, within the /64's and the /48's budgets", i)
	}
	requireRateLimited(t, get(h, "/v1/orders", "nobody", from(1000), nil), limitClientAddress)
	require.Equal(t, http.StatusUnauthorized, get(h, "/v1/orders", "nobody", "[2001:db8:8::1]:443", nil).Code,
		"another /48 has its own budget")
}

// A flood of new client addresses past the table's bound shares one
// overflow budget: pushing entries out cannot earn fresh budgets.
func TestLimitAddressFloodSharesOverflow(t *testing.T) {
	t.Parallel()
	h, err := NewHandler(Config{Auth: operators(), APIEnabled: true, Limits: Limits{UnknownKeyRate: 0.001, UnknownKeyBurst: 2}})
	require.NoError(t, err)
	addr := func(i int) string {
		return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String() + ":1"
	}
	for i := range maxTrackedAddresses {
		require.Equal(t, http.StatusUnauthorized, get(h, "/v1/orders", "nobody", addr(i), nil).Code)
	}
	next := maxTrackedAddresses
	for range 2 { // the overflow bucket's burst
		require.Equal(t, http.StatusUnauthorized, get(h, "/v1/orders", "nobody", addr(next), nil).Code)
		next++
	}
	requireRateLimited(t, get(h, "/v1/orders", "nobody", addr(next), nil), limitClientAddress)
}

func TestLimitClientAddress(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::1/128")}
	cases := []struct {
		name    string
		trusted []netip.Prefix
		remote  string
		xff     []string
		want    string
	}{
		{name: "no trusted proxies: the header is ignored", remote: "192.0.2.1:5555", xff: []string{"203.0.113.9"}, want: "192.0.2.1"},
		{name: "an untrusted peer's header is ignored", trusted: trusted, remote: "192.0.2.1:5555", xff: []string{"203.0.113.9"}, want: "192.0.2.1"},
		{name: "a trusted peer names the client", trusted: trusted, remote: "10.1.2.3:5555", xff: []string{"203.0.113.9"}, want: "203.0.113.9"},
		{name: "the right-most untrusted hop, not what the client wrote", trusted: trusted, remote: "10.1.2.3:5555",
			xff: []string{"198.51.100.7, 203.0.113.9, 10.0.0.5"}, want: "203.0.113.9"},
		{name: "several header lines read as one list", trusted: trusted, remote: "10.1.2.3:5555",
			xff: []string{"198.51.100.7", "203.0.113.9,10.9.9.9"}, want: "203.0.113.9"},
		{name: "a malformed hop stops at the last trusted one", trusted: trusted, remote: "10.1.2.3:5555",
			xff: []string{"203.0.113.9, bogus, 10.0.0.5"}, want: "10.0.0.5"},
		{name: "all hops trusted", trusted: trusted, remote: "10.1.2.3:5555", xff: []string{"10.0.0.7"}, want: "10.0.0.7"},
		{name: "a trusted peer without the header", trusted: trusted, remote: "10.1.2.3:5555", want: "10.1.2.3"},
		{name: "IPv6 counts per /64", remote: "[2001:db8:1:2:3:4:5:6]:443", want: "2001:db8:1:2::"},
		{name: "a trusted IPv6 proxy", trusted: trusted, remote: "[2001:db8:ffff::1]:443", xff: []string{"[2001:db8:aa:bb::9]:1234"}, want: "2001:db8:aa:bb::"},
		{name: "IPv4-mapped IPv6 is IPv4", remote: "[::ffff:192.0.2.1]:80", want: "192.0.2.1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.remote
			r.Header["X-Forwarded-For"] = tc.xff
			got := newLimiter(Limits{}, tc.trusted).clientAddress(r)
			require.Equal(t, tc.want, got.String())
		})
	}
}

// The tables forget idle entries and never grow past their bound.
func TestLimitTablesAreBounded(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tbl := newBuckets[int](10, 20, 100) // full again after 2s idle
	for i := range 1000 {
		tbl.get(i, now)
	}
	require.Equal(t, 100, tbl.len(), "a flood of keys stays within the bound")

	held := tbl.get(-1, now)
	held.count.Add(1) // a request in flight keeps its entry
	later := now.Add(sweepEvery + time.Second)
	tbl.get(5000, later)
	require.Equal(t, 2, tbl.len(), "idle entries are dropped; the held one and the new one stay")
	require.Same(t, held, tbl.get(-1, later))

	shared := newBuckets[int](10, 20, 100).withOverflow()
	for i := range 100 {
		shared.get(i, now)
	}
	require.Same(t, shared.get(1000, now), shared.get(1001, now), "past the bound, new keys share the overflow bucket")
	require.Equal(t, 100, shared.len())
}

func TestLimitHeaderArithmetic(t *testing.T) {
	t.Parallel()
	q := quota{name: limitKey, burst: 100, rate: 50, tokens: 0.5}
	require.Equal(t, 1, q.retryAfter(), "half a token at 50/s: under a second, rounded up to 1")
	q = quota{name: limitKey, burst: 10, rate: 0.5, tokens: 0}
	require.Equal(t, 2, q.retryAfter())
	l := newLimiter(Limits{KeyRate: 0.5, KeyBurst: 10, MerchantRate: 2, MerchantBurst: 5}, nil)
	h := http.Header{}
	l.setHeaders(h, quota{name: limitKey, burst: 10, rate: 0.5, tokens: 7.5})
	require.Equal(t, "10", h.Get("RateLimit-Limit"))
	require.Equal(t, "7", h.Get("RateLimit-Remaining"))
	require.Equal(t, "5", h.Get("RateLimit-Reset"), "2.5 tokens at 0.5/s")
	require.Equal(t, `"key";r=7;t=5`, h.Get("RateLimit"))
	require.Equal(t, `"key";q=10;w=20, "merchant";q=5;w=3`, h.Get("RateLimit-Policy"))
}
