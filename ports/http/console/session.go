package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"hearth/app/access"
)

// Sessions live in this process's memory: a restart signs everyone out,
// and behind a load balancer with several API instances a browser must
// stick to one (docs/console.md). The cookie holds only a random id; the
// key it was opened with stays on the server, so that the key is checked
// again (a revoked or expired key ends its sessions, within KeyRecheck).
const (
	// sessionIdle ends a session nobody used for this long.
	sessionIdle = 8 * time.Hour
	// sessionMax ends a session this long after sign-in, used or not.
	sessionMax = 24 * time.Hour
	// maxSessions bounds the memory sessions take; at the cap, sign-in
	// answers 503 until sessions end.
	maxSessions = 10_000
	// signinCookie carries the token of the sign-in form (login CSRF):
	// the form posts it back, and a page of another site cannot read it.
	signinCookie = "hearth_console_signin"
)

// session is one signed-in browser.
type session struct {
	id        string // the cookie's value
	secret    string // the key it signed in with
	principal access.Principal
	csrf      string
	loc       *time.Location
	created   time.Time

	mu        sync.Mutex
	lastSeen  time.Time
	checkedAt time.Time // when the key was last authenticated
	flash     flash
}

// flash is a one-shot message shown on the next page.
type flash struct {
	Kind string // "ok", "warn" or "error"
	Text string
	// Behind is set when the page after a write may not show it yet: the
	// read models had not reached the write within the consistency
	// timeout.
	Behind bool
}

func (s *session) setFlash(f flash) {
	s.mu.Lock()
	s.flash = f
	s.mu.Unlock()
}

func (s *session) takeFlash() flash {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.flash
	s.flash = flash{}
	return f
}

type sessions struct {
	mu   sync.Mutex
	byID map[[sha256.Size]byte]*session
}

func newSessions() *sessions { return &sessions{byID: map[[sha256.Size]byte]*session{}} }

// randomToken is 32 random bytes, base64url.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// key indexes sessions by the id's hash, so that a lookup's timing says
// nothing about the ids in the map.
func key(id string) [sha256.Size]byte { return sha256.Sum256([]byte(id)) }

// create opens a session, or returns nil when the store is full even after
// dropping ended sessions.
func (ss *sessions) create(p access.Principal, secret string, loc *time.Location, now time.Time) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.byID) >= maxSessions {
		for k, s := range ss.byID {
			if s.ended(now) {
				delete(ss.byID, k)
			}
		}
		if len(ss.byID) >= maxSessions {
			return nil
		}
	}
	s := &session{id: randomToken(), secret: secret, principal: p, csrf: randomToken(), loc: loc,
		created: now, lastSeen: now, checkedAt: now}
	ss.byID[key(s.id)] = s
	return s
}

func (s *session) ended(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return now.Sub(s.lastSeen) > sessionIdle || now.Sub(s.created) > sessionMax
}

// get returns the live session with the id, and notes its use.
func (ss *sessions) get(id string, now time.Time) *session {
	if id == "" {
		return nil
	}
	k := key(id)
	ss.mu.Lock()
	s := ss.byID[k]
	if s != nil && s.ended(now) {
		delete(ss.byID, k)
		s = nil
	}
	ss.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		s.lastSeen = now
		s.mu.Unlock()
	}
	return s
}

func (ss *sessions) drop(id string) {
	ss.mu.Lock()
	delete(ss.byID, key(id))
	ss.mu.Unlock()
}

// sameToken compares a token from a request with the expected one in
// constant time; an empty expected token matches nothing.
func sameToken(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// cookie is the console's cookie with the given value: Secure (browsers
// keep Secure cookies of http://localhost too), HttpOnly, SameSite=Strict
// and scoped to /console/. maxAge < 0 deletes it.
func cookie(name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: "/console/", MaxAge: maxAge,
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode}
}

// signinLimiter bounds failed sign-ins per client address, so that the
// form is not a way to look up made-up keys in bulk. Only failures spend
// it.
type signinLimiter struct {
	mu     sync.Mutex
	byAddr map[string]*rate.Limiter
}

// Failed sign-ins: a burst of 10, then one every 2 seconds per address.
const (
	signinFailBurst = 10
	signinFailEvery = 2 * time.Second
	signinAddrs     = 10_000 // addresses tracked; past it the map starts anew
)

func newSigninLimiter() *signinLimiter { return &signinLimiter{byAddr: map[string]*rate.Limiter{}} }

func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (l *signinLimiter) limiter(addr string) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.byAddr[addr]
	if lim == nil {
		if len(l.byAddr) >= signinAddrs {
			clear(l.byAddr)
		}
		lim = rate.NewLimiter(rate.Every(signinFailEvery), signinFailBurst)
		l.byAddr[addr] = lim
	}
	return lim
}

// allowed reports whether the address may try a key now (it has failures
// to spend).
func (l *signinLimiter) allowed(addr string, now time.Time) bool {
	return l.limiter(addr).TokensAt(now) >= 1
}

// failed spends one of the address's failures.
func (l *signinLimiter) failed(addr string, now time.Time) {
	l.limiter(addr).AllowN(now, 1)
}
