package httpport

import (
	"crypto/sha256"
	"sync"
	"time"

	"hearth/app/access"
)

// keyCache remembers the principals of known keys for a short time (by the
// SHA-256 of the secret, never the secret), so that a key's requests do not
// each cost a lookup. An entry is never extended: a revoked or expired key,
// or a deactivated worker, stops working within the TTL. Unknown keys are
// not cached (the budget per client address limits them). With a TTL of 0
// no entry is usable, but keys are still remembered as known.
//
// After its TTL an entry is still remembered as known for knownFor: such a
// key is looked up again, but even from a client address whose budget of
// unknown keys is spent. A flood of made-up keys cannot produce one, so a
// real client behind the same address as the flood (a NAT, a proxy) keeps
// working. Within hintFor of its last check, a write to an aggregate starts
// with the principal found then, its transaction checking the key (hint,
// keygate.go).
type keyCache struct {
	ttl time.Duration

	mu        sync.Mutex
	m         map[[sha256.Size]byte]cachedKey
	nextSweep time.Time
}

type cachedKey struct {
	p          access.Principal
	expires    time.Time // usable until then
	hintUntil  time.Time // a write to an aggregate starts with p until then
	knownUntil time.Time // looked up past the address budget until then
}

// knownFor is how long a key that authenticated is remembered as known.
const knownFor = 10 * time.Minute

// hintFor is how long after its key was last found working (a lookup, or a
// write's own check) a write to an aggregate starts without a lookup, its
// transaction checking the key (keygate.go), when KEY_CACHE_TTL is
// shorter. Such a request is admitted by its merchant's limits before its
// key is checked, as a cached key's is: a key revoked within hintFor of its
// last use can spend its merchant's budgets with the requests it has in
// flight then, no more (a key refused or left unchecked is forgotten).
const hintFor = 5 * time.Second

// maxCachedKeys bounds the cache; only keys that authenticated get in.
const maxCachedKeys = 1 << 14

func newKeyCache(ttl time.Duration) *keyCache {
	return &keyCache{ttl: max(ttl, 0), m: map[[sha256.Size]byte]cachedKey{}}
}

// get returns the principal of a cached key (ok); known reports a key
// whose entry has expired but which authenticated within knownFor.
func (c *keyCache) get(hash [sha256.Size]byte, now time.Time) (p access.Principal, ok, known bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, found := c.m[hash]
	switch {
	case !found:
		return access.Principal{}, false, false
	case now.Before(e.expires):
		return e.p, true, true
	case now.Before(e.knownUntil):
		return access.Principal{}, false, true
	}
	delete(c.m, hash)
	return access.Principal{}, false, false
}

// hint returns the principal of a key found working within hintFor (or the
// TTL) (ok), for a write that checks the key in its own transaction; fresh
// reports an entry still usable by itself (within the TTL).
func (c *keyCache) hint(hash [sha256.Size]byte, now time.Time) (p access.Principal, fresh, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, found := c.m[hash]
	if !found || !now.Before(e.hintUntil) {
		return access.Principal{}, false, false
	}
	return e.p, now.Before(e.expires), true
}

// forget drops a key that no longer authenticates.
func (c *keyCache) forget(hash [sha256.Size]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, hash)
}

func (c *keyCache) put(hash [sha256.Size]byte, p access.Principal, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.After(c.nextSweep) {
		c.nextSweep = now.Add(max(c.ttl, sweepEvery)) // with a TTL of 0, not on every put
		for h, e := range c.m {
			if !now.Before(e.knownUntil) {
				delete(c.m, h)
			}
		}
	}
	if len(c.m) >= maxCachedKeys {
		for h := range c.m {
			delete(c.m, h)
			break
		}
	}
	// A key stops working at its expiry, not up to a TTL after it.
	expires := now.Add(c.ttl)
	if !p.ExpiresAt.IsZero() && p.ExpiresAt.Before(expires) {
		expires = p.ExpiresAt
	}
	c.m[hash] = cachedKey{p: p, expires: expires, hintUntil: now.Add(max(c.ttl, hintFor)), knownUntil: now.Add(max(c.ttl, knownFor))}
}
