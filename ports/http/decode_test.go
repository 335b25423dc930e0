package httpport

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app"
	"hearth/app/command"
	"hearth/domain/apperr"
	"hearth/domain/reference"
)

// decodeAnswer runs decode on body as a handler would, and answers what the
// API would: the status and problem of its error (a panic is caught and
// reported, so that the test fails with a message rather than a crash).
func decodeAnswer(body string, dst any) (status int, p problem, panicked any) {
	defer func() {
		if v := recover(); v != nil {
			panicked = v
		}
	}()
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader([]byte(body)))
	err := decode(r, dst)
	if err == nil {
		return http.StatusOK, problem{}, nil
	}
	(&server{log: slog.New(slog.DiscardHandler)}).writeError(rec, r, err)
	_ = json.Unmarshal(rec.Body.Bytes(), &p)
	return rec.Code, p, nil
}

// Only white space may follow the body's object: a closing bracket is
// data after it too (json.Decoder.More takes one for the end).
func TestDecodeRefusesDataAfterTheObject(t *testing.T) {
	for _, body := range []string{`{"name":"Bo"}}`, `{"name":"Bo"}]`, `{"name":"Bo"} }`, "{\"name\":\"Bo\"}\n]\n", `{"name":"Bo"} {}`, `{"name":"Bo"}x`} {
		status, p, panicked := decodeAnswer(body, &customerInput{})
		require.Nil(t, panicked, "%q", body)
		require.Equal(t, http.StatusBadRequest, status, "%q", body)
		require.Equal(t, "/problems/malformed-request", p.Type, "%q", body)
	}
	status, _, _ := decodeAnswer("{\"name\":\"Bo\"} \r\n\t", &customerInput{})
	require.Equal(t, http.StatusOK, status, "white space may follow")
}

// An escaped lone UTF-16 surrogate is not text: encoding/json would store
// U+FFFD in its place, so it is refused, naming its field. A U+FFFD sent
// as such is text like any other.
func TestDecodeRefusesALoneSurrogateEscape(t *testing.T) {
	for _, esc := range []string{`\ud800`, `\udfff`, `a\ud83db`, `\uDC00x`} {
		var in customerInput
		status, p, panicked := decodeAnswer(fmt.Sprintf(`{"name":"%s"}`, esc), &in)
		require.Nil(t, panicked, esc)
		require.Equal(t, http.StatusUnprocessableEntity, status, esc)
		require.Len(t, p.Errors, 1, esc)
		require.Equal(t, "name", p.Errors[0].Field, esc)
	}
	for _, ok := range []string{`\ud83d\ude00`, `\ufffd`, `\uFFFD`, "\uFFFD"} {
		var in customerInput
		status, _, _ := decodeAnswer(fmt.Sprintf(`{"name":"%s"}`, ok), &in)
		require.Equal(t, http.StatusOK, status, ok)
	}
}

// claimAll is an idempotency store that grants every claim and counts
// what becomes of it.
type claimAll struct {
	mu                  sync.Mutex
	released, completed int
}

func (c *claimAll) Claim(context.Context, string, string, string, []byte, time.Duration) (string, error) {
	return "token", nil
}

func (c *claimAll) Get(context.Context, string, string, string) (command.IdempotencyRecord, error) {
	return command.IdempotencyRecord{}, apperr.ErrNotFound
}

func (c *claimAll) Complete(context.Context, *command.Idempotent, command.Answer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.completed++
	return nil
}

func (c *claimAll) Release(context.Context, *command.Idempotent) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.released++
	return nil
}

// panickingStore is a customers store whose every write panics.
type panickingStore struct{}

func (panickingStore) Insert(context.Context, *reference.Customer) error { panic("boom") }
func (panickingStore) Update(context.Context, string, string, func(*reference.Customer) (*command.Audit, error)) (reference.Customer, error) {
	panic("boom")
}

// A write with an Idempotency-Key that panics is answered 500, as any
// 5xx releases its key at once: a retry runs the write again instead of
// waiting for the claim's lease.
func TestAPanickingIdempotentWriteReleasesItsKey(t *testing.T) {
	customers, err := command.NewRecords[reference.Customer](panickingStore{})
	require.NoError(t, err)
	store := &claimAll{}
	srv, err := NewHandler(Config{Auth: oneKey{}, APIEnabled: true, Idempotency: store, Log: slog.New(slog.DiscardHandler),
		App: app.Application{Commands: app.Commands{Customers: customers}}})
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, "/v1/customers", strings.NewReader(`{"name":"Ada"}`))
	req.Header.Set("Authorization", "Bearer hk_x")
	req.Header.Set(HeaderIdempotencyKey, "key-1")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	require.Equal(t, http.StatusInternalServerError, rec.Code, rec.Body.String())
	require.Equal(t, 1, store.released, "the claim is released")
	require.Zero(t, store.completed)
}
