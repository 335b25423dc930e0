package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"time"

	"hearth/app/access"
	"hearth/domain/civil"
)

// Sessions live in the store (SessionStore: the event store's database,
// beside the keys), so that every API instance sees them: no sticky
// sessions behind a load balancer, and a restart signs nobody out. The
// cookie holds a random token; the store keeps only its SHA-256 and the
// key's id, and this process keeps no key material: only the fair share
// remembers the SHA-256 of tokens found lately (httpport.FairShare.Lookup).
// Every lookup checks the key too: a revoked or expired key ends its
// sessions at once.
const (
	// SessionIdle ends a session nobody used for this long.
	SessionIdle = 8 * time.Hour
	// SessionLifetime ends a session this long after sign-in, used or not.
	SessionLifetime = 24 * time.Hour
	// SessionsPerKey caps one key's sessions: a sign-in past it closes
	// the key's least recently used session, so that no key can fill the
	// store.
	SessionsPerKey = 20
	// signinSuffix names the cookie that carries the token of the sign-in
	// form (login CSRF), after the session's cookie (Config.CookieName):
	// the form posts it back, and a page of another site cannot read it.
	// One per console: the admin listener's console shares the browser's
	// cookies with the public one's (cookies do not tell ports apart), and
	// one's sign-in page would replace the token of the other's form open
	// in another tab, and its sign-in delete it.
	signinSuffix = "_signin"
)

// SessionStore keeps the console's sessions where every instance sees them
// (refdata.Store). Session and OpenSession answer apperr.ErrNotFound for a
// session that ended or a key that no longer works.
type SessionStore interface {
	OpenSession(ctx context.Context, n access.NewSession) error
	Session(ctx context.Context, u access.SessionUse) (access.Session, error)
	// SessionCheck is the check a session's write runs in its transaction
	// (access.KeyCheck), as the API's writes check their key: that the
	// session is still open at at and its key (keyID) still works. The
	// lookup at the request's start is not enough: a key revoked or
	// expired between it and the write would still write.
	SessionCheck(tokenHash []byte, keyID string, at time.Time) *access.KeyCheck
	SetSessionFlash(ctx context.Context, tokenHash []byte, flash string) error
	CloseSession(ctx context.Context, tokenHash []byte) error
}

// session is one signed-in browser, for the request at hand.
type session struct {
	hash      []byte // the SHA-256 of the cookie's token: the session's id in the store
	principal access.Principal
	csrf      string
	loc       *time.Location
	flash     flash // the stored flash, for the next page
	store     SessionStore
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

// setFlash stores the message for the session's next page, whichever
// instance serves it.
func (s *session) setFlash(ctx context.Context, f flash) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return s.store.SetSessionFlash(ctx, s.hash, string(b))
}

// takeFlash returns the stored message and clears it.
func (s *session) takeFlash(ctx context.Context) (flash, error) {
	f := s.flash
	if f.Text == "" {
		return f, nil
	}
	s.flash = flash{}
	return f, s.store.SetSessionFlash(ctx, s.hash, "")
}

// decodeFlash reads a stored flash; anything unreadable is none.
func decodeFlash(stored string) flash {
	var f flash
	if stored != "" {
		_ = json.Unmarshal([]byte(stored), &f)
	}
	return f
}

// randomToken is 32 random bytes, base64url.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// tokenHash is a session's id in the store: the SHA-256 of its token. The
// token is 256 random bits, so a fast hash is enough.
func tokenHash(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// csrfOf is a session's CSRF token, derived from its token (so that it is
// stored nowhere) under a label of its own: it differs from the stored
// hash, and the pages that show it do not show the token.
func csrfOf(token string) string {
	sum := sha256.Sum256([]byte("hearth console csrf\x00" + token))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// zone is the named time zone, UTC when the name is none or no zone's own
// name. civil.LoadZone keeps the zones it loaded (time.LoadLocation reads
// the zone's file on every call), and only under their own names:
// time.LoadLocation also loads "./UTC", "././UTC", ... and "Local", the
// server's zone, and a cache of whatever loaded would grow with every new
// spelling a sign-in sends.
func zone(name string) *time.Location {
	if len(name) >= 64 {
		return time.UTC
	}
	l, err := civil.LoadZone("tz", name)
	if err != nil {
		return time.UTC
	}
	return l
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
