package httpport

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"hearth/app/access"
	"hearth/app/command"
	"hearth/domain/apperr"
)

// HeaderIdempotencyKey makes a POST, PUT or PATCH under /v1 safe to retry.
const HeaderIdempotencyKey = "Idempotency-Key"

// headerReplayed marks an answer replayed from an earlier attempt.
const headerReplayed = "Idempotent-Replayed"

// Idempotency keeps the records of idempotency keys (internal/idempotency).
type Idempotency interface {
	Claim(ctx context.Context, merchantID, scope, key string, fingerprint []byte, lease time.Duration) (token string, err error)
	Get(ctx context.Context, merchantID, scope, key string) (command.IdempotencyRecord, error)
	Complete(ctx context.Context, i *command.Idempotent, a command.Answer) error
	Release(ctx context.Context, i *command.Idempotent) error
}

// storedHeaders are the headers of an answer that are stored with it and
// replayed; the others (correlation id, rate limits) belong to each request.
var storedHeaders = []string{"Content-Type", "Location", "ETag", HeaderPosition}

// idempotent runs a write at most once per Idempotency-Key of the
// principal (idempotencyScope): the first attempt claims the key, the write
// stores its answer in its own transaction, and a repeat with the same key
// and body is answered from there. A repeat while the first attempt runs waits for its answer, up to
// IdempotencyWait, then answers 409 idempotency-in-progress; the same key
// with another body (or another route, or another If-Match) is 422
// idempotency-key-reused.
//
// Answers below 500 are kept, except 409 and 412 (a race or a stale
// version, as expected_version or as If-Match states it: the client may
// retry) and 429; those, a 5xx or a client gone away release the key, so a
// retry with it runs the write again.
func (s *server) idempotent(h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		keys := r.Header.Values(HeaderIdempotencyKey)
		if len(keys) == 0 || s.Idempotency == nil {
			return h(w, r)
		}
		key, err := checkIdempotencyKey(keys)
		if err != nil {
			return err
		}
		body, err := readBody(r)
		if err != nil {
			return err // too large: 413; too slow: 408; compressed: 415; cut off: 400
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		ifMatch := r.Header.Get("If-Match")
		fp := fingerprint(r.Method, r.URL.Path, ifMatch, body)
		p := principal(r)
		merchantID, scope := p.MerchantID, idempotencyScope(p)
		for {
			token, replay, err := s.claimKey(r.Context(), merchantID, scope, key, fp, func() []byte {
				return fingerprint(r.Method, r.URL.Path, "", body) // as the version before If-Match counted
			})
			if err != nil {
				return err
			}
			if replay != nil {
				w.Header().Set(headerReplayed, "true")
				writeAnswer(w, *replay)
				return nil
			}
			i := &command.Idempotent{MerchantID: merchantID, Key: key, Token: token}
			a, err := s.runClaimed(r, h, i)
			if errors.Is(err, command.ErrKeyTakenOver) {
				continue // a retry took the key over after our lease ran out: its answer counts
			}
			if err != nil {
				return err
			}
			writeAnswer(w, a)
			return nil
		}
	}
}

// runClaimed runs the write of attempt i, which holds the key, and keeps or
// releases the key by its answer.
func (s *server) runClaimed(r *http.Request, h handlerFunc, i *command.Idempotent) (command.Answer, error) {
	cleanup := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	}
	releaseKey := func() {
		ctx, cancel := cleanup()
		defer cancel()
		if err := s.Idempotency.Release(ctx, i); err != nil {
			s.log.WarnContext(r.Context(), "release idempotency key", "error", err)
		}
	}
	release, err := s.idempotentSlots.acquire(r.Context(), i.MerchantID)
	if err != nil {
		ctx, cancel := cleanup()
		defer cancel()
		return command.Answer{}, errors.Join(err, s.Idempotency.Release(ctx, i))
	}
	defer release()
	rec := &answerRecorder{header: http.Header{}}
	runCtx := context.WithValue(command.WithIdempotent(r.Context(), i), idempotentCtxKey{}, i)
	// A panic is answered 500 by recoverPanics, further out: the claim goes
	// first, as for any 5xx, so a retry is not kept waiting for its lease.
	defer func() {
		if v := recover(); v != nil {
			releaseKey()
			panic(v)
		}
	}()
	err = h(rec, r.WithContext(runCtx))
	if errors.Is(err, command.ErrKeyTakenOver) {
		return command.Answer{}, err
	}
	if err != nil {
		s.writeError(rec, r, err)
	}
	a := rec.answer()
	switch {
	case err == nil && i.Answered() != nil: // stored with the write
	case errors.Is(err, access.ErrKeyRefused):
		// The key no longer works: its 401 is no answer to keep for the
		// other keys of its scope; the claim goes.
		releaseKey()
	case a.Status != 0 && a.Status < 500 && a.Status != http.StatusConflict && a.Status != http.StatusPreconditionFailed &&
		a.Status != http.StatusTooManyRequests:
		// A write refused before it wrote anything: kept on its own.
		ctx, cancel := cleanup()
		defer cancel()
		if err := s.Idempotency.Complete(ctx, i, kept(a)); err != nil {
			if !errors.Is(err, command.ErrKeyTakenOver) {
				// Not stored, and answered 5xx: the claim goes, as for any
				// 5xx, so that the retry runs now rather than wait out the
				// lease of an attempt that is over. A completion that
				// committed after all keeps its answer: the release deletes
				// only a claim without one.
				releaseKey()
			}
			return command.Answer{}, err
		}
	default:
		releaseKey()
	}
	if a.Status == 0 { // nothing written: the client went away
		return command.Answer{}, cmp.Or(r.Context().Err(), context.Canceled)
	}
	return a, nil
}

// claimKey claims the key in the merchant's scope for this attempt (token),
// or returns the answer of an earlier attempt with the same fingerprint
// (replay). It waits, polling, while another attempt holds the key. A
// legacy record (command.IdempotencyRecord.Legacy) is compared with
// legacyFP's.
func (s *server) claimKey(ctx context.Context, merchantID, scope, key string, fp []byte, legacyFP func() []byte) (token string, replay *command.Answer, err error) {
	// Wall-clock time, not s.Now (a clock for what requests record).
	deadline := time.Now().Add(s.IdempotencyWait)
	pause := 5 * time.Millisecond
	claimAgain := true // at once, the first time the key looks free
	for {
		token, err := s.Idempotency.Claim(ctx, merchantID, scope, key, fp, s.IdempotencyLease)
		if err != nil || token != "" {
			return token, nil, err
		}
		rec, err := s.Idempotency.Get(ctx, merchantID, scope, key)
		want := fp
		if err == nil && rec.Legacy {
			want = legacyFP()
		}
		free := false
		switch {
		case errors.Is(err, apperr.ErrNotFound):
			free = true // released between the two: claim it
		case err != nil:
			return "", nil, err
		case rec.Forgotten:
			a, err := answerForgotten(rec.Location)
			return "", &a, err
		case !bytes.Equal(rec.Fingerprint, want):
			return "", nil, errKeyReused
		case rec.Answer != nil:
			return "", rec.Answer, nil
		case !rec.Legacy && !rec.LockedUntil.After(time.Now()):
			free = true // its holder's lease is over: take it over
		}
		if !time.Now().Before(deadline) {
			return "", nil, errInProgress
		}
		// Claim decides by the database's clock: when it still refuses a
		// key this clock calls free, the two clocks differ, and the next
		// claims wait as those of a held key do rather than loop.
		if free && claimAgain {
			claimAgain = false
			continue
		}
		t := time.NewTimer(min(pause, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return "", nil, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// idempotencyError is a request that reuses a key wrongly or too soon.
type idempotencyError struct {
	status int
	slug   string
	detail string
}

func (e *idempotencyError) Error() string { return e.detail }

var (
	errKeyReused = &idempotencyError{http.StatusUnprocessableEntity, "idempotency-key-reused",
		"this Idempotency-Key was used with another request (another body, route or If-Match); use a new key for a new request"}
	errInProgress = &idempotencyError{http.StatusConflict, "idempotency-in-progress",
		"a request with this Idempotency-Key is still running; retry shortly to get its answer"}
)

// checkIdempotencyKey reads the one Idempotency-Key: 1 to 255 visible ASCII
// characters (a UUID is a good key).
func checkIdempotencyKey(values []string) (string, error) {
	if len(values) != 1 {
		return "", malformed(HeaderIdempotencyKey, "must be sent once")
	}
	key := values[0]
	if key == "" || len(key) > 255 || strings.ContainsFunc(key, func(c rune) bool { return c < 0x21 || c > 0x7e }) {
		return "", malformed(HeaderIdempotencyKey, "must be 1 to 255 visible ASCII characters, such as a UUID")
	}
	return key, nil
}

// idempotencyScope is whom a principal's keys belong to within its
// merchant: its role, and a worker's staff member. Keys of one role share
// their records (an operator's retry may come through another operator key,
// or a rotated one); a key of another role or another worker never gets
// their answers, which its own request might not have been given.
func idempotencyScope(p access.Principal) string {
	if p.Role == access.Worker {
		return string(p.Role) + ":" + p.StaffID
	}
	return string(p.Role)
}

// fingerprint identifies a request for its key: the method, the path, the
// If-Match header and the body. A JSON body counts by its content, not its
// spacing or member order, so a client that re-encodes the same request on
// retry still matches. Without If-Match (or with "*", which states no
// version), the fingerprint is the one of the versions before If-Match
// counted; with it, the quoted header comes before the path, where no path
// (always "/...") can put a quote.
func fingerprint(method, path, ifMatch string, body []byte) []byte {
	h := sha256.New()
	h.Write([]byte(method + " "))
	if v := strings.TrimSpace(ifMatch); v != "" && v != "*" {
		h.Write([]byte(strconv.Quote(v) + " "))
	}
	h.Write([]byte(strings.ToLower(path) + "\n"))
	if canonical, ok := canonicalJSON(body); ok {
		body = canonical
	}
	h.Write(body)
	return h.Sum(nil)
}

// canonicalJSON is body with its keys sorted and its spacing dropped, when
// that loses nothing the request's decoding looks at: two requests
// differing only so are the same request. A body the decoding refuses
// (data after the object, a member given twice, text that is not valid
// UTF-8 or holds an escaped lone surrogate: each decodes to something else
// than was sent) is compared as its bytes.
func canonicalJSON(body []byte) ([]byte, bool) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if dec.Decode(&v) != nil || !utf8.Valid(body) {
		return nil, false
	}
	if value, alone := decodedValue(body, dec); !alone || hasRepeatedMember(value) {
		return nil, false
	}
	canonical, err := json.Marshal(v) // maps encode with sorted keys
	if err != nil || (bytes.Contains(canonical, []byte("\uFFFD")) && !ownsReplacement(body)) {
		return nil, false
	}
	return canonical, true
}

// kept is the part of an answer that is stored.
func kept(a command.Answer) command.Answer {
	out := command.Answer{Status: a.Status, Body: a.Body, Header: map[string]string{}}
	for _, k := range storedHeaders {
		if v, ok := a.Header[k]; ok {
			out.Header[k] = v
		}
	}
	return out
}

// answerRecorder keeps what a handler writes, so that it can be stored
// before it is sent.
type answerRecorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *answerRecorder) Header() http.Header { return r.header }

func (r *answerRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *answerRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

func (r *answerRecorder) answer() command.Answer {
	a := command.Answer{Status: r.status, Body: r.body.Bytes(), Header: map[string]string{}}
	for k, vs := range r.header {
		if len(vs) > 0 {
			a.Header[k] = vs[0]
		}
	}
	return a
}

type idempotentCtxKey struct{}

// idempotentOf is the attempt the request runs as, or nil.
func idempotentOf(r *http.Request) *command.Idempotent {
	i, _ := r.Context().Value(idempotentCtxKey{}).(*command.Idempotent)
	return i
}
