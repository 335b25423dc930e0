package httpport

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"time"

	"hearth/app/access"
	"hearth/domain/apperr"
)

// keyChecker makes the check of a key that a write's transaction runs
// (refdata.Store); an Authenticator without it has every key looked up.
type keyChecker interface {
	KeyCheck(p access.Principal, secret string) *access.KeyCheck
}

// deferKey starts a write to an aggregate (a keyInWrite route) of a key
// found working within hintFor without looking the key up: the principal
// is the one found then, and the write's transaction checks that the key still
// works in its first round trip (access.KeyCheck), which saves the request
// a round trip of its own. The answer waits behind a keyGate, so that no
// answer, not even a 403 or a 400, goes out for a key that no longer works.
// A request with an Idempotency-Key is looked up first as before: its
// claim on the key is a write of its own; so is one that says Expect (a
// 100 Continue would go out before the gate: a key that no longer works
// would be asked for its body where an unknown one is refused). Their
// writes check the key in their transaction all the same (server.auth).
// It returns a nil gate when the key must be looked up.
func (s *server) deferKey(keyInWrite bool, w http.ResponseWriter, r *http.Request, secret string, now time.Time) (access.Principal, *keyGate) {
	checker, ok := s.Auth.(keyChecker)
	if !keyInWrite || !ok || len(r.Header.Values(HeaderIdempotencyKey)) > 0 || len(r.Header.Values("Expect")) > 0 {
		return access.Principal{}, nil
	}
	hash := sha256.Sum256([]byte(secret))
	p, fresh, known := s.keyHits.hint(hash, now)
	if !known {
		return access.Principal{}, nil
	}
	return p, &keyGate{ResponseWriter: w, s: s, r: r, secret: secret, hash: hash, p: p, fresh: fresh,
		check: checker.KeyCheck(p, secret)}
}

// keyGate holds a request's answer until its key is known to work. A write
// whose transaction checked the key has nothing to wait for; a request
// that ends before any transaction (a body refused, a 403, a 429) has its
// key looked up when it answers, unless the key cache still vouches for
// it (KEY_CACHE_TTL), as it would for any request. For a key that does not
// work, whatever the handler meant to answer is dropped for the 401 an
// unknown key gets.
type keyGate struct {
	http.ResponseWriter
	s      *server
	r      *http.Request
	secret string
	hash   [sha256.Size]byte
	p      access.Principal
	fresh  bool // the key cache's entry was within KEY_CACHE_TTL
	check  *access.KeyCheck

	decided, open bool
}

// pass decides, once, whether the handler's answer may go out, and answers
// in its place when not.
func (g *keyGate) pass() bool {
	if g.decided {
		return g.open
	}
	g.decided = true
	if !g.check.Passed() && !g.check.Refused() && !g.fresh {
		// Not on the request's context: net/http ends it when a read of the
		// connection fails, and a body that did not arrive within
		// HTTP_READ_TIMEOUT is such a failure while its client waits for
		// the 408. A client that went away gets nothing either way.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(g.r.Context()), gateLookupTimeout)
		defer cancel()
		p, err := g.s.Auth.Authenticate(ctx, g.secret)
		switch {
		case err == nil && p.KeyID == g.p.KeyID:
			g.check.Pass()
		case err == nil || errors.Is(err, apperr.ErrNotFound):
			g.check.Refuse()
		default:
			g.reset()
			g.s.writeError(g.ResponseWriter, g.r, err)
			return false
		}
	}
	if g.check.Refused() {
		g.reset()
		refuseKey(g.ResponseWriter)
		return false
	}
	g.open = true
	return true
}

// gateLookupTimeout bounds the key gate's own lookup, which the request's
// context does not.
const gateLookupTimeout = 5 * time.Second

// reset drops the headers set since the request came in (the limits', the
// handler's), keeping those every answer carries, as recoverPanics does.
func (g *keyGate) reset() {
	h := g.ResponseWriter.Header()
	id := h.Get("X-Correlation-ID")
	clear(h)
	h.Set("X-Correlation-ID", id)
	setAPIHeaders(h)
}

func (g *keyGate) WriteHeader(code int) {
	if g.pass() {
		g.ResponseWriter.WriteHeader(code)
	}
}

func (g *keyGate) Write(b []byte) (int, error) {
	if !g.pass() {
		return len(b), nil // dropped: the 401 went out instead
	}
	return g.ResponseWriter.Write(b)
}

// settle, deferred, records what the request learnt of its key: a key that
// worked is cached (and used) as after a lookup; any other (refused, or
// unchecked: the client went away, the lookup failed) is forgotten, so its
// next request is looked up, and refused before it is admitted, rather
// than spend its merchant's budgets again. A panic is answered by
// recoverPanics, outside the gate, only for a key that works; for any
// other the gate's 401 stands and the panic is logged here.
func (g *keyGate) settle(now time.Time) {
	if v := recover(); v != nil {
		if v == http.ErrAbortHandler || g.pass() {
			defer panic(v)
		} else {
			g.s.log.ErrorContext(g.r.Context(), "handler panicked", "method", g.r.Method, "path", g.r.URL.Path,
				"correlation_id", correlationID(g.r), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		}
	}
	switch {
	case g.check.Passed():
		g.s.keyHits.put(g.hash, g.p, now)
	case g.open: // the key cache vouched for the key (fresh): its entry stays as it was
	default:
		g.s.keyHits.forget(g.hash)
		return
	}
	if g.open && g.s.KeyUsed != nil {
		g.s.KeyUsed(g.p.KeyID)
	}
}

// forgetRefused, deferred, forgets a key its write's transaction refused,
// so that its next request is looked up, and refused before it is admitted.
func (s *server) forgetRefused(secret string, check *access.KeyCheck) {
	if check.Refused() {
		s.keyHits.forget(sha256.Sum256([]byte(secret)))
	}
}
