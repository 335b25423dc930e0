package httpport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/access"
	"hearth/app/command"
	"hearth/domain/apperr"
	"hearth/domain/uuid"
)

type oneKey struct{}

func (oneKey) Authenticate(context.Context, string) (access.Principal, error) {
	return access.Principal{KeyID: "k1", MerchantID: "m1", Role: access.Operator}, nil
}

// heldKey is an idempotency store in which another attempt holds every key
// until answer is set.
type heldKey struct {
	mu     sync.Mutex
	answer *command.Answer
	gets   int
}

func (h *heldKey) Claim(context.Context, string, string, string, []byte, time.Duration) (string, error) {
	return "", nil
}

func (h *heldKey) Get(context.Context, string, string, string) (command.IdempotencyRecord, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gets++
	return command.IdempotencyRecord{Fingerprint: fingerprint(http.MethodPost, "/v1/customers", "", []byte(`{"name":"Ada"}`)),
		Answer: h.answer, LockedUntil: time.Now().Add(time.Hour)}, nil
}

func (h *heldKey) Complete(context.Context, *command.Idempotent, command.Answer) error { return nil }
func (h *heldKey) Release(context.Context, *command.Idempotent) error                  { return nil }

func postWithKey(t *testing.T, srv http.Handler) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/v1/customers", strings.NewReader(`{"name":"Ada"}`))
	req.Header.Set("Authorization", "Bearer hk_x")
	req.Header.Set(HeaderIdempotencyKey, "key-1")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec
}

// A repeat while the first attempt runs waits for its answer, and is told
// 409 idempotency-in-progress when the wait runs out.
func TestIdempotentRepeatWaitsForTheFirstAttempt(t *testing.T) {
	t.Parallel()
	store := &heldKey{}
	srv, err := NewHandler(Config{Auth: oneKey{}, APIEnabled: true, Idempotency: store, IdempotencyWait: 50 * time.Millisecond})
	require.NoError(t, err)

	rec := postWithKey(t, srv)
	require.Equal(t, http.StatusConflict, rec.Code, rec.Body.String())
	require.Equal(t, "1", rec.Header().Get("Retry-After"))
	var p problem
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
	require.Equal(t, "/problems/idempotency-in-progress", p.Type)
	require.Greater(t, store.gets, 1, "it looked again while it waited")

	// The first attempt answers while the repeat waits: the repeat gets it.
	store = &heldKey{}
	srv, err = NewHandler(Config{Auth: oneKey{}, APIEnabled: true, Idempotency: store, IdempotencyWait: time.Minute})
	require.NoError(t, err)
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- postWithKey(t, srv) }()
	require.Eventually(t, func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		if store.gets < 2 {
			return false
		}
		store.answer = &command.Answer{Status: http.StatusCreated, Header: map[string]string{"Location": "/v1/customers/c1"}, Body: []byte(`{"id":"c1"}`)}
		return true
	}, 5*time.Second, time.Millisecond)
	rec = <-done
	require.Equal(t, http.StatusCreated, rec.Code)
	require.Equal(t, `{"id":"c1"}`, rec.Body.String())
	require.Equal(t, "/v1/customers/c1", rec.Header().Get("Location"))
	require.Equal(t, "true", rec.Header().Get(headerReplayed))
}

// Retries are matched by content, not spelling; anything else differs,
// If-Match included.
func TestFingerprint(t *testing.T) {
	t.Parallel()
	body := []byte(`{"a":1,"b":[1,2],"c":{"x":"y"}}`)
	base := fingerprint(http.MethodPost, "/v1/orders", "", body)
	require.Equal(t, base, fingerprint(http.MethodPost, "/v1/orders", "", []byte("{\n \"c\": {\"x\":\"y\"}, \"b\":[1, 2], \"a\":1}\n")))
	require.Equal(t, base, fingerprint(http.MethodPost, "/V1/ORDERS", "", body))
	require.Equal(t, base, fingerprint(http.MethodPost, "/v1/orders", " * ", body), "* states no version")
	// Without If-Match, the fingerprint is the one records kept before
	// If-Match counted (legacy records are compared with it).
	old := sha256.Sum256([]byte("POST /v1/orders\n" + `{"a":1,"b":[1,2],"c":{"x":"y"}}`))
	require.Equal(t, old[:], base)
	tagged := fingerprint(http.MethodPost, "/v1/orders", `"3"`, body)
	require.Equal(t, tagged, fingerprint(http.MethodPost, "/v1/orders", ` "3" `, body))
	for name, other := range map[string][]byte{
		"method":   fingerprint(http.MethodPut, "/v1/orders", "", body),
		"path":     fingerprint(http.MethodPost, "/v1/customers", "", body),
		"value":    fingerprint(http.MethodPost, "/v1/orders", "", []byte(`{"a":2,"b":[1,2],"c":{"x":"y"}}`)),
		"order":    fingerprint(http.MethodPost, "/v1/orders", "", []byte(`{"a":1,"b":[2,1],"c":{"x":"y"}}`)),
		"number":   fingerprint(http.MethodPost, "/v1/orders", "", []byte(`{"a":1.0,"b":[1,2],"c":{"x":"y"}}`)),
		"if-match": tagged,
		"another":  fingerprint(http.MethodPost, "/v1/orders", `"4"`, body),
	} {
		require.NotEqual(t, base, other, name)
		if name != "if-match" {
			require.NotEqual(t, tagged, other, name)
		}
	}
}

func FuzzFingerprint(f *testing.F) {
	for _, ifMatch := range []string{"", `"3"`, "*"} {
		f.Add(`{"customer_id":"c","amount_cents":100}`, ifMatch)
		f.Add(`{"a":[1,{"b":null}],"c":"\u00e9"}`, ifMatch)
		f.Add(`not json`, ifMatch)
		f.Add(``, ifMatch)
	}
	f.Fuzz(func(t *testing.T, body, ifMatch string) {
		fp := fingerprint(http.MethodPost, "/v1/orders", ifMatch, []byte(body))
		require.Len(t, fp, 32)
		if v := strings.TrimSpace(ifMatch); v != "" && v != "*" {
			require.NotEqual(t, fingerprint(http.MethodPost, "/v1/orders", "", []byte(body)), fp, "If-Match counts")
		}
		var v any
		if json.Unmarshal([]byte(body), &v) != nil {
			return
		}
		// The same JSON re-encoded with other spacing fingerprints the same.
		var indented bytes.Buffer
		if json.Indent(&indented, []byte(body), " ", "\t") == nil {
			require.Equal(t, fp, fingerprint(http.MethodPost, "/v1/orders", ifMatch, indented.Bytes()))
		}
	})
}

func FuzzIdempotencyKey(f *testing.F) {
	f.Add("8d1f0c5e-6b5e-4a43-9c1e-1f0f0c5e6b5e")
	f.Add("")
	f.Add("a b")
	f.Add(strings.Repeat("k", 256))
	f.Fuzz(func(t *testing.T, key string) {
		got, err := checkIdempotencyKey([]string{key})
		if err != nil {
			return
		}
		require.Equal(t, key, got)
		require.True(t, len(key) >= 1 && len(key) <= 255)
		for _, c := range []byte(key) {
			require.True(t, c > 0x20 && c < 0x7f, "visible ASCII only: %q", key)
		}
	})
}

// If-Match reads one strong tag as a version, or refuses precisely.
func FuzzIfMatch(f *testing.F) {
	for _, s := range []string{`"3"`, `W/"3"`, `*`, `3`, `"03"`, `"-1"`, `"1", "2"`, `""`, `"99999999999999999999"`} {
		f.Add(s, -1)
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, header string, body int) {
		r := httptest.NewRequest(http.MethodPatch, "/v1/orders/x", nil)
		r.Header["If-Match"] = []string{header}
		var fromBody *int
		if body >= 0 {
			fromBody = &body
		}
		v, err := expectedVersion(r, fromBody)
		if err != nil {
			var bad *badRequest
			var pre *preconditionFailed
			require.True(t, errors.As(err, &bad) || errors.As(err, &pre), "%T: %v", err, err)
			return
		}
		trimmed := strings.TrimSpace(header)
		if trimmed == "" || trimmed == "*" {
			require.Equal(t, fromBody, v)
			return
		}
		require.NotNil(t, v)
		require.Equal(t, trimmed, etag(*v), "the tag is the one an ETag header gives")
		if fromBody != nil {
			require.Equal(t, *fromBody, *v)
		}
		require.Equal(t, strconv.Quote(strconv.Itoa(*v)), trimmed)
	})
}

// freshKeys is an idempotency store in which every key is new.
type freshKeys struct{}

func (freshKeys) Claim(context.Context, string, string, string, []byte, time.Duration) (string, error) {
	return uuid.New(), nil
}

func (freshKeys) Get(context.Context, string, string, string) (command.IdempotencyRecord, error) {
	return command.IdempotencyRecord{}, apperr.ErrNotFound
}

func (freshKeys) Complete(context.Context, *command.Idempotent, command.Answer) error { return nil }
func (freshKeys) Release(context.Context, *command.Idempotent) error                  { return nil }

// One merchant's idempotent writes hold at most its share of the slots:
// while merchant A's writes hold theirs and more of them wait, merchant B's
// write runs at once instead of queueing behind them.
func TestIdempotentSlotsAreShared(t *testing.T) {
	t.Parallel()
	s := &server{Config: Config{Idempotency: freshKeys{}, IdempotencyWait: time.Second, IdempotencyLease: time.Minute},
		log: slog.New(slog.DiscardHandler), idempotentSlots: newFairSlots(4, 2)}
	var runningA atomic.Int32
	open := make(chan struct{})
	h := s.idempotent(func(w http.ResponseWriter, r *http.Request) error {
		if principal(r).MerchantID == "A" {
			runningA.Add(1)
			<-open
		}
		w.WriteHeader(http.StatusCreated)
		return nil
	})
	send := func(merchant, key string) <-chan int {
		done := make(chan int, 1)
		go func() {
			req := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(`{}`))
			req = req.WithContext(context.WithValue(req.Context(), principalKey{}, access.Principal{MerchantID: merchant, Role: access.Operator}))
			req.Header.Set(HeaderIdempotencyKey, key)
			rec := httptest.NewRecorder()
			if err := h(rec, req); err != nil {
				s.writeError(rec, req, err)
			}
			done <- rec.Code
		}()
		return done
	}
	var writesA []<-chan int
	for i := range 4 {
		writesA = append(writesA, send("A", "a-"+strconv.Itoa(i)))
	}
	require.Eventually(t, func() bool { return int(runningA.Load())+s.idempotentSlots.waiting() == 4 }, 5*time.Second, time.Millisecond,
		"every write of A runs or waits for a slot")
	select {
	case code := <-send("B", "b-1"):
		require.Equal(t, http.StatusCreated, code)
	case <-time.After(10 * time.Second): // a bound on a failing test, not a wait for an event
		t.Fatal("B's write waited behind A's")
	}
	require.Equal(t, int32(2), runningA.Load(), "A ran its share")
	require.Equal(t, 2, s.idempotentSlots.waiting())
	close(open)
	for _, w := range writesA {
		require.Equal(t, http.StatusCreated, <-w)
	}
	require.Equal(t, int32(4), runningA.Load())
}

// A freed slot goes to the waiting merchant that holds the fewest, not to
// the earliest waiter; a waiter whose request ends leaves the queue.
func TestFairSlotsHandOff(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newFairSlots(2, 2)
	releaseA1, err := s.acquire(ctx, "A")
	require.NoError(t, err)
	_, err = s.acquire(ctx, "A")
	require.NoError(t, err)
	acquired := func(merchant string) <-chan func() {
		c := make(chan func(), 1)
		go func() {
			release, err := s.acquire(ctx, merchant)
			if err == nil {
				c <- release
			}
		}()
		return c
	}
	a3 := acquired("A")
	require.Eventually(t, func() bool { return s.waiting() == 1 }, 5*time.Second, time.Millisecond)
	b1 := acquired("B")
	require.Eventually(t, func() bool { return s.waiting() == 2 }, 5*time.Second, time.Millisecond)

	releaseA1()
	require.Equal(t, 1, s.waiting(), "one waiter got the slot")
	require.Eventually(t, func() bool { return len(b1) == 1 }, 5*time.Second, time.Millisecond, "B got it, A's third write still waits")
	(<-b1)()
	require.Eventually(t, func() bool { return len(a3) == 1 }, 5*time.Second, time.Millisecond)
	<-a3 // A holds both slots again

	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.acquire(gone, "C")
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, s.waiting())
}

// skewedLease is an idempotency store on a database whose clock is behind
// the API instance's: the holder's lease has ended by the instance's clock
// (locked_until is in its past) but not yet by the database's, so the
// database refuses the takeover (Claim returns "").
type skewedLease struct {
	claims atomic.Int32
}

func (s *skewedLease) Claim(context.Context, string, string, string, []byte, time.Duration) (string, error) {
	s.claims.Add(1)
	return "", nil
}

func (s *skewedLease) Get(context.Context, string, string, string) (command.IdempotencyRecord, error) {
	return command.IdempotencyRecord{Fingerprint: fingerprint(http.MethodPost, "/v1/customers", "", []byte(`{"name":"Ada"}`)),
		LockedUntil: time.Now().Add(-time.Millisecond)}, nil
}

func (s *skewedLease) Complete(context.Context, *command.Idempotent, command.Answer) error {
	return nil
}
func (s *skewedLease) Release(context.Context, *command.Idempotent) error { return nil }

// A retry waiting for a key whose lease looks over by the instance's clock
// but not by the database's (which Claim goes by) polls at the pace of any
// wait, instead of claiming again and again for as long as the clocks
// differ.
func TestAnIdempotentWaitDoesNotLoopWhenTheClocksDiffer(t *testing.T) {
	t.Parallel()
	store := &skewedLease{}
	srv, err := NewHandler(Config{Auth: oneKey{}, APIEnabled: true, Idempotency: store, IdempotencyWait: 300 * time.Millisecond})
	require.NoError(t, err)

	rec := postWithKey(t, srv)
	require.Equal(t, http.StatusConflict, rec.Code, rec.Body.String())
	// Polling 5, 10, 20, 40, 80, 100 ms... makes well under 20 claims in 300 ms.
	require.LessOrEqual(t, store.claims.Load(), int32(20),
		"the wait hammered the database with %d claims in 300 ms", store.claims.Load())
}
