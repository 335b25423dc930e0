package httpport

import (
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"hearth/app/access"
)

// Limits are the API's fair share: a token bucket per key, one per merchant
// (shared by all its keys), a cap on each merchant's requests in flight,
// and a budget of failed authentications per client address. A rate or a
// cap of 0 turns that limit off; the zero Limits limits nothing. Over a
// limit the answer is 429 /problems/rate-limited at once, never a wait.
type Limits struct {
	// KeyRate is each key's sustained rate (requests per second) and
	// KeyBurst its bucket's size.
	KeyRate  float64
	KeyBurst int
	// MerchantRate and MerchantBurst are the same for a merchant, whatever
	// key it uses. Keys without a merchant (platform admin) have none.
	MerchantRate  float64
	MerchantBurst int
	// MerchantInFlight caps a merchant's requests in flight (read-your-writes
	// waits included), so that it cannot hold the whole database pool.
	MerchantInFlight int
	// UnknownKeyRate and UnknownKeyBurst are the failed authentications
	// (unknown or revoked keys) a client address may make. Once they are
	// spent, a request from it whose key is not in the key cache is answered
	// 429 without looking the key up.
	UnknownKeyRate  float64
	UnknownKeyBurst int
}

// Which limit a 429 names (the problem's "limit" member).
const (
	limitKey           = "key"
	limitMerchant      = "merchant"
	limitInFlight      = "in-flight"
	limitClientAddress = "client-address"
)

// Bounds of the limiters' tables. An entry idle long enough for its bucket
// to be full again is dropped (a new one would be the same). Past the bound,
// keys and merchants (only authenticated ones get an entry) make room by
// dropping an arbitrary idle entry; client addresses instead share one
// overflow bucket, so that a flood of new addresses cannot earn fresh
// budgets by pushing older ones out. Memory stays bounded (about 200 bytes
// an entry) and so do the lookups.
const (
	maxTrackedAddresses = 1 << 14
	maxTrackedKeys      = 1 << 16
	sweepEvery          = 10 * time.Second
)

// siteShare is how many addresses' worth of unknown-key budget one IPv6 /48
// (a site's usual allocation) gets, shared by all its /64s: a client that
// owns a /48 has 65,536 /64s to draw from, not 65,536 budgets.
const siteShare = 8

// limiter enforces Limits.
type limiter struct {
	Limits
	keys      *buckets[string]     // by key id; nil when off
	merchants *buckets[string]     // by merchant id, with the in-flight count; nil when both are off
	addresses *buckets[netip.Addr] // by client address (IPv6: /64); nil when off
	sites     *buckets[netip.Addr] // by IPv6 /48, siteShare budgets each; nil when off
	trusted   []netip.Prefix
	policy    string // the RateLimit-Policy value
}

func newLimiter(l Limits, trusted []netip.Prefix) *limiter {
	lim := &limiter{Limits: l, trusted: trusted}
	var policies []string
	if l.KeyRate > 0 {
		l.KeyBurst = max(l.KeyBurst, 1)
		lim.keys = newBuckets[string](l.KeyRate, l.KeyBurst, maxTrackedKeys)
		policies = append(policies, policy(limitKey, l.KeyRate, l.KeyBurst))
	}
	if l.MerchantRate > 0 || l.MerchantInFlight > 0 {
		l.MerchantBurst = max(l.MerchantBurst, 1)
		lim.merchants = newBuckets[string](l.MerchantRate, l.MerchantBurst, maxTrackedKeys)
		if l.MerchantRate > 0 {
			policies = append(policies, policy(limitMerchant, l.MerchantRate, l.MerchantBurst))
		}
	}
	if l.UnknownKeyRate > 0 {
		l.UnknownKeyBurst = max(l.UnknownKeyBurst, 1)
		lim.addresses = newBuckets[netip.Addr](l.UnknownKeyRate, l.UnknownKeyBurst, maxTrackedAddresses).withOverflow()
		lim.sites = newBuckets[netip.Addr](l.UnknownKeyRate*siteShare, l.UnknownKeyBurst*siteShare, maxTrackedAddresses).withOverflow()
	}
	lim.Limits = l
	lim.policy = strings.Join(policies, ", ")
	return lim
}

// policy is one quota policy of the RateLimit-Policy field (IETF
// draft-ietf-httpapi-ratelimit-headers): q requests per window of w
// seconds, the time an empty bucket takes to fill.
func policy(name string, r float64, burst int) string {
	return strconv.Quote(name) + ";q=" + strconv.Itoa(burst) + ";w=" + strconv.Itoa(ceilSeconds(float64(burst)/r))
}

// verdict is the outcome of the limits for one request: refused names the
// limit that refused it (empty: allowed); q is the bucket the answer's
// RateLimit-* headers describe.
type verdict struct {
	refused string
	q       quota
	release *bucket // holds an in-flight slot until done
}

// quota is a token bucket's state as the RateLimit-* headers tell it.
type quota struct {
	name   string
	burst  int
	rate   float64
	tokens float64
}

func (v verdict) done() {
	if v.release != nil {
		v.release.count.Add(-1)
	}
}

// admit applies the key, merchant and in-flight limits to a request of p
// at now.
func (l *limiter) admit(p access.Principal, now time.Time) verdict {
	var v verdict
	// A request refused by one limit spends nothing of the others: the
	// tokens it took are given back, so a key whose merchant is over its
	// budget keeps its own, and a 429 names the limit that refused it.
	var taken []*rate.Reservation
	refuse := func(name string) verdict {
		for _, r := range taken {
			r.CancelAt(now)
		}
		v.refused = name
		return v
	}
	take := func(lim *rate.Limiter) bool {
		r := lim.ReserveN(now, 1)
		if !r.OK() || r.DelayFrom(now) > 0 {
			r.CancelAt(now)
			return false
		}
		taken = append(taken, r)
		return true
	}
	if l.keys != nil {
		b := l.keys.get(p.KeyID, now)
		ok := take(b.lim)
		v.q = quota{name: limitKey, burst: l.KeyBurst, rate: l.KeyRate, tokens: b.lim.TokensAt(now)}
		if !ok {
			return refuse(limitKey)
		}
	}
	if l.merchants == nil || p.MerchantID == "" {
		return v
	}
	b := l.merchants.get(p.MerchantID, now)
	if b.lim != nil && !take(b.lim) {
		v.q = quota{name: limitMerchant, burst: l.MerchantBurst, rate: l.MerchantRate, tokens: b.lim.TokensAt(now)}
		return refuse(limitMerchant)
	}
	if l.MerchantInFlight > 0 {
		if b.count.Add(1) > int32(l.MerchantInFlight) {
			b.count.Add(-1)
			return refuse(limitInFlight)
		}
		v.release = b
	}
	return v
}

// lookup reports whether a key that is not in the cache may be looked up
// for r (counted against its client address, and an IPv6 address's /48 too);
// when it may, the caller calls the returned function once the lookup is
// over, telling whether the key was unknown (which spends the budgets).
// Lookups in flight count against the budgets too, so a burst of concurrent
// requests cannot overdraw them.
func (l *limiter) lookup(r *http.Request, now time.Time) (done func(unknown bool), refused quota, ok bool) {
	if l.addresses == nil {
		return func(bool) {}, quota{}, true
	}
	addr := l.clientAddress(r)
	held := []*bucket{l.addresses.get(addr, now)}
	if addr.Is6() {
		held = append(held, l.sites.get(netip.PrefixFrom(addr, 48).Masked().Addr(), now))
	}
	for i, b := range held {
		tokens := b.lim.TokensAt(now)
		if float64(b.count.Add(1)) > tokens {
			for _, h := range held[:i+1] {
				h.count.Add(-1)
			}
			q := quota{name: limitClientAddress, burst: l.UnknownKeyBurst, rate: l.UnknownKeyRate, tokens: tokens}
			if i > 0 {
				q.burst, q.rate = q.burst*siteShare, q.rate*siteShare
			}
			return nil, q, false
		}
	}
	return func(unknown bool) {
		for _, b := range held {
			if unknown {
				b.lim.AllowN(now, 1)
			}
			b.count.Add(-1)
		}
	}, quota{}, true
}

// The RateLimit-* field names in Go's canonical form, so that setting them
// does not allocate the canonical name on every answer.
var (
	hdrLimit     = http.CanonicalHeaderKey("RateLimit-Limit")
	hdrRemaining = http.CanonicalHeaderKey("RateLimit-Remaining")
	hdrReset     = http.CanonicalHeaderKey("RateLimit-Reset")
	hdrRateLimit = http.CanonicalHeaderKey("RateLimit")
	hdrPolicy    = http.CanonicalHeaderKey("RateLimit-Policy")
)

// setHeaders writes the RateLimit-* fields of q: the widely used
// RateLimit-Limit, -Remaining and -Reset (seconds until the bucket is
// full), and the current draft's RateLimit and RateLimit-Policy.
func (l *limiter) setHeaders(h http.Header, q quota) {
	if q.name == "" {
		return
	}
	remaining := max(int(q.tokens), 0)
	reset := ceilSeconds((float64(q.burst) - q.tokens) / q.rate)
	h.Set(hdrLimit, strconv.Itoa(q.burst))
	h.Set(hdrRemaining, strconv.Itoa(remaining))
	h.Set(hdrReset, strconv.Itoa(reset))
	h.Set(hdrRateLimit, `"`+q.name+`";r=`+strconv.Itoa(remaining)+";t="+strconv.Itoa(reset))
	if q.name == limitClientAddress {
		h.Set(hdrPolicy, policy(limitClientAddress, q.rate, q.burst))
	} else if l.policy != "" {
		h.Set(hdrPolicy, l.policy)
	}
}

// retryAfter is when q has a token again, in whole seconds, at least 1.
func (q quota) retryAfter() int {
	if q.name == "" {
		return 1
	}
	return max(ceilSeconds((1-q.tokens)/q.rate), 1)
}

func ceilSeconds(s float64) int {
	if s <= 0 || math.IsNaN(s) {
		return 0
	}
	return int(min(math.Ceil(s-1e-9), math.MaxInt32))
}

// writeRateLimited answers 429 for the limit that refused the request.
func (l *limiter) writeRateLimited(w http.ResponseWriter, refused string, q quota) {
	retry := q.retryAfter()
	if refused == limitInFlight {
		retry = 1 // a slot frees as soon as one of them is answered
	}
	var detail string
	switch refused {
	case limitKey:
		detail = "this API key is over its rate limit of " + rateText(l.KeyRate, l.KeyBurst)
	case limitMerchant:
		detail = "this merchant is over its rate limit of " + rateText(l.MerchantRate, l.MerchantBurst) + ", shared by all its keys"
	case limitInFlight:
		detail = "this merchant already has " + strconv.Itoa(l.MerchantInFlight) + " requests in flight, the most it may have"
	case limitClientAddress:
		detail = "too many requests with unknown or revoked keys from this client address (" + rateText(l.UnknownKeyRate, l.UnknownKeyBurst) + ")"
	}
	h := w.Header()
	l.setHeaders(h, q)
	h.Set("Retry-After", strconv.Itoa(retry))
	p := newProblem(http.StatusTooManyRequests, "rate-limited", detail+"; retry after "+strconv.Itoa(retry)+" s")
	p.Limit = refused
	writeProblem(w, p)
}

func rateText(r float64, burst int) string {
	return strconv.FormatFloat(r, 'g', -1, 64) + " requests/s, burst " + strconv.Itoa(burst)
}

// clientAddress is the address a request's unknown keys are counted
// against: the peer's IP, or, when the peer is a trusted proxy, the
// right-most X-Forwarded-For address that is not itself a trusted proxy.
// IPv6 addresses count per /64, the block one subscriber usually gets.
func (l *limiter) clientAddress(r *http.Request) netip.Addr {
	addr := parseAddr(r.RemoteAddr)
	if len(l.trusted) > 0 && l.isTrusted(addr) {
		addr = l.forwardedFor(r.Header.Values("X-Forwarded-For"), addr)
	}
	if addr.Is6() {
		addr = netip.PrefixFrom(addr, 64).Masked().Addr()
	}
	return addr
}

// forwardedFor walks the X-Forwarded-For hops from the right (the hop the
// trusted peer added) while they are trusted proxies; a malformed hop ends
// the walk at the last trusted one.
func (l *limiter) forwardedFor(values []string, peer netip.Addr) netip.Addr {
	addr := peer
	for i := len(values) - 1; i >= 0; i-- {
		hops := values[i]
		for hops != "" {
			var hop string
			if j := strings.LastIndexByte(hops, ','); j >= 0 {
				hops, hop = hops[:j], hops[j+1:]
			} else {
				hops, hop = "", hops
			}
			a := parseAddr(strings.TrimSpace(hop))
			if !a.IsValid() {
				return addr
			}
			if addr = a; !l.isTrusted(a) {
				return a
			}
		}
	}
	return addr
}

func (l *limiter) isTrusted(a netip.Addr) bool {
	for _, p := range l.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseAddr reads "ip", "ip:port" or "[ipv6]:port"; the zero Addr when it
// is none of them.
func parseAddr(s string) netip.Addr {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone("")
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		if a, err := netip.ParseAddr(host); err == nil {
			return a.Unmap().WithZone("")
		}
	}
	return netip.Addr{}
}

// buckets is a bounded table of token buckets by key.
type buckets[K comparable] struct {
	rate  rate.Limit // 0: entries only count (merchants' in-flight without a rate)
	burst int
	idle  time.Duration // an entry unused this long has a full bucket again
	max   int

	mu        sync.Mutex
	m         map[K]*bucket
	nextSweep time.Time
	overflow  *bucket // shared by new keys while the table is full; nil: evict instead
}

// bucket is one entry: its token bucket (nil without a rate) and a count
// of requests holding it (in flight, or lookups under way).
type bucket struct {
	lim   *rate.Limiter
	count atomic.Int32
	last  time.Time // guarded by buckets.mu
}

func newBuckets[K comparable](r float64, burst, maxEntries int) *buckets[K] {
	idle := time.Minute
	if r > 0 {
		idle = max(time.Duration(float64(burst)/r*float64(time.Second)), time.Second)
	}
	return &buckets[K]{rate: rate.Limit(r), burst: burst, idle: idle, max: maxEntries, m: map[K]*bucket{}}
}

// withOverflow makes the keys that find t full share one overflow bucket
// instead of evicting an entry.
func (t *buckets[K]) withOverflow() *buckets[K] {
	t.overflow = t.newBucket()
	return t
}

func (t *buckets[K]) newBucket() *bucket {
	b := &bucket{}
	if t.rate > 0 {
		b.lim = rate.NewLimiter(t.rate, t.burst)
	}
	return b
}

// get returns k's entry, creating it with a full bucket; while the table is
// full, a new k gets the overflow bucket, or an idle entry makes room.
func (t *buckets[K]) get(k K, now time.Time) *bucket {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.m[k]
	if b == nil {
		if now.After(t.nextSweep) {
			t.sweep(now)
		}
		if len(t.m) >= t.max {
			if t.overflow != nil {
				return t.overflow
			}
			t.evictOne()
		}
		b = t.newBucket()
		t.m[k] = b
	}
	b.last = now
	return b
}

// sweep drops the entries that are idle and held by no request.
func (t *buckets[K]) sweep(now time.Time) {
	t.nextSweep = now.Add(sweepEvery)
	for k, b := range t.m {
		if now.Sub(b.last) >= t.idle && b.count.Load() == 0 {
			delete(t.m, k)
		}
	}
}

// evictOne drops an arbitrary entry held by no request.
func (t *buckets[K]) evictOne() {
	for k, b := range t.m {
		if b.count.Load() == 0 {
			delete(t.m, k)
			return
		}
	}
}

func (t *buckets[K]) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
