package httpport

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"

	"hearth/app/access"
	"hearth/domain/apperr"
)

// FairShare is the API's fair share (limits.go) as a handler the server
// mounts beside its routes spends it: the web console under /console/. Its
// requests then spend the budgets the API's requests spend, of the same
// server: a key's and its merchant's rates, the merchant's requests in
// flight, and the client address's budget of unknown keys, with the
// address read as the API reads it (TRUSTED_PROXIES).
type FairShare struct {
	s *server
	// found remembers the credentials Lookup found lately (by SHA-256),
	// as the key cache remembers known keys.
	found *keyCache
}

type fairShareKey struct{}

// FairShareOf returns the fair share of the server that routed r, or nil
// when no server of NewHandler did.
func FairShareOf(r *http.Request) *FairShare {
	f, _ := r.Context().Value(fairShareKey{}).(*FairShare)
	return f
}

// shareFairly serves h with the server's fair share in each request's
// context.
func (s *server) shareFairly(h http.Handler) http.Handler {
	f := &FairShare{s: s, found: newKeyCache(knownFor)}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), fairShareKey{}, f)))
	})
}

// RateLimitedError is a request over one of the limits. The answer's
// Retry-After and RateLimit-* fields are set already; Problem is what the
// API answers such a request with (429).
type RateLimitedError struct{ Problem Problem }

func (e *RateLimitedError) Error() string { return "rate limited: " + e.Problem.Detail }

// Authenticate resolves an API key as the API's authentication does:
// through the key cache, or else a lookup the client address's budget of
// unknown keys allows. An unknown key is apperr.ErrNotFound (and spends
// that budget); a key not looked up because the budget is spent is a
// *RateLimitedError.
func (f *FairShare) Authenticate(w http.ResponseWriter, r *http.Request, secret string) (access.Principal, error) {
	now := f.s.Now()
	p, refused, err := f.s.resolve(r, secret, now)
	if errors.Is(err, errLookupRefused) {
		return access.Principal{}, f.refuse(w, limitClientAddress, refused)
	}
	return p, err
}

// Lookup runs find, the lookup of credential, a secret that is not an API
// key (a console session's token), under the same budget as the lookup of
// an unknown key: refused without running find when the client address has
// spent it (a *RateLimitedError), spending it when find reports
// apperr.ErrNotFound. Unknown tokens then cost the database no more than
// unknown keys do. As with keys, a credential found in the last 10
// minutes is looked up even from an address whose budget is spent: a
// flood cannot make one up, so the real sessions behind the flood's
// address keep working.
func (f *FairShare) Lookup(w http.ResponseWriter, r *http.Request, credential string, find func() error) error {
	now := f.s.Now()
	hash := sha256.Sum256([]byte(credential))
	done, refused, ok := f.s.limits.lookup(r, now)
	if !ok {
		if _, _, known := f.found.get(hash, now); !known {
			return f.refuse(w, limitClientAddress, refused)
		}
		done = func(bool) {}
	}
	err := find()
	unknown := errors.Is(err, apperr.ErrNotFound)
	done(unknown)
	switch {
	case unknown:
		f.found.forget(hash)
	case err == nil:
		f.found.put(hash, access.Principal{}, now)
	}
	return err
}

// Admit spends a request of p against its key's and its merchant's rates
// and takes one of its merchant's in-flight slots, which release gives
// back; over a limit it is a *RateLimitedError (release is then a no-op).
func (f *FairShare) Admit(w http.ResponseWriter, p access.Principal) (release func(), err error) {
	v := f.s.limits.admit(p, f.s.Now())
	if v.refused != "" {
		v.done()
		return func() {}, f.refuse(w, v.refused, v.q)
	}
	f.s.limits.setHeaders(w.Header(), v.q)
	return v.done, nil
}

// refuse sets the answer's fields of a request the limit refused and
// returns the problem the API answers it with, as the API writes it
// (writeRateLimited), for the caller to show in its own form.
func (f *FairShare) refuse(w http.ResponseWriter, limit string, q quota) error {
	rec := &problemRecorder{h: http.Header{}}
	f.s.limits.writeRateLimited(rec, limit, q)
	e := &RateLimitedError{}
	if err := json.Unmarshal(rec.body, &e.Problem); err != nil {
		e.Problem = newProblem(http.StatusTooManyRequests, "rate-limited", "over the limit "+limit)
	}
	h := w.Header()
	for _, name := range []string{"Retry-After", hdrLimit, hdrRemaining, hdrReset, hdrRateLimit, hdrPolicy} {
		if v := rec.h.Values(name); len(v) > 0 {
			h[name] = v
		}
	}
	return e
}

// problemRecorder keeps an answer the limiter writes, to be shown in
// another form.
type problemRecorder struct {
	h    http.Header
	body []byte
}

func (r *problemRecorder) Header() http.Header { return r.h }
func (r *problemRecorder) WriteHeader(int)     {}
func (r *problemRecorder) Write(b []byte) (int, error) {
	r.body = append(r.body, b...)
	return len(b), nil
}
