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
// not cached (the budget per client address limits them). A nil cache
// caches nothing.
type keyCache struct {
	ttl time.Duration

	mu        sync.Mutex
	m         map[[sha256.Size]byte]cachedKey
	nextSweep time.Time
}

type cachedKey struct {
	p       access.Principal
	expires time.Time
}

// maxCachedKeys bounds the cache; only keys that authenticated get in.
const maxCachedKeys = 1 << 14

func newKeyCache(ttl time.Duration) *keyCache {
	if ttl <= 0 {
		return nil
	}
	return &keyCache{ttl: ttl, m: map[[sha256.Size]byte]cachedKey{}}
}

func (c *keyCache) get(hash [sha256.Size]byte, now time.Time) (access.Principal, bool) {
	if c == nil {
		return access.Principal{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[hash]
	if !ok {
		return access.Principal{}, false
	}
	if !now.Before(e.expires) {
		delete(c.m, hash)
		return access.Principal{}, false
	}
	return e.p, true
}

func (c *keyCache) put(hash [sha256.Size]byte, p access.Principal, now time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.After(c.nextSweep) {
		c.nextSweep = now.Add(c.ttl)
		for h, e := range c.m {
			if !now.Before(e.expires) {
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
	c.m[hash] = cachedKey{p: p, expires: now.Add(c.ttl)}
}
