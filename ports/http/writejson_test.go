package httpport

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An answer that cannot be encoded (here a time past the year 9999) is a
// 500 problem, logged, not the status with a body that breaks off.
func TestAnswerThatCannotBeEncoded(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	s := &server{log: slog.New(slog.NewJSONHandler(&logs, nil))}
	h := s.recoverPanics(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"at": time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)})
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/x", nil))
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	var p problem
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), rec.Body.String())
	require.Contains(t, logs.String(), "encode the answer")
}
