package httpport

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/database"
)

// A failover under way (no host of a multi-host URL accepts writes) and a
// request that outlived its deadline (a server gone silent) are 503 with
// Retry-After: the client tries again, and nothing is logged as a fault.
func TestUnavailableDatabaseIs503(t *testing.T) {
	t.Parallel()
	s := &server{log: slog.New(slog.DiscardHandler)}
	expired, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-expired.Done()
	for name, tc := range map[string]struct {
		ctx    context.Context
		err    error
		status int
		typ    string
	}{
		"no primary": {context.Background(), fmt.Errorf("authenticate: %w", &database.NoPrimaryError{Answers: []string{"127.0.0.1:5432: read-only"}}),
			http.StatusServiceUnavailable, "/problems/database-unavailable"},
		"request deadline": {expired, fmt.Errorf("load order: %w", context.DeadlineExceeded),
			http.StatusServiceUnavailable, "/problems/timeout"},
		"anything else": {context.Background(), fmt.Errorf("load order: boom"),
			http.StatusInternalServerError, "/problems/internal"},
	} {
		t.Run(name, func(t *testing.T) {
			w := httptest.NewRecorder()
			s.writeError(w, httptest.NewRequestWithContext(tc.ctx, http.MethodPost, "/v1/orders", nil), tc.err)
			require.Equal(t, tc.status, w.Code)
			var p problem
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p))
			require.Equal(t, tc.typ, p.Type)
			if tc.status == http.StatusServiceUnavailable {
				require.Equal(t, "1", w.Header().Get("Retry-After"))
			}
			require.NotContains(t, w.Body.String(), "127.0.0.1", "no internals in the answer")
		})
	}
}
