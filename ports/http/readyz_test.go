package httpport

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/app/access"
	"hearth/app/apperr"
)

// countedKeys knows one admin key and counts its lookups.
type countedKeys struct{ lookups atomic.Int64 }

func (c *countedKeys) Authenticate(_ context.Context, secret string) (access.Principal, error) {
	c.lookups.Add(1)
	if secret == "hk_admin" {
		return access.Principal{KeyID: "a1", Role: access.Admin}, nil
	}
	return access.Principal{}, apperr.ErrNotFound
}

// A flood of /readyz costs neither a database ping per request nor a key
// lookup per unknown key.
func TestReadyzFloodIsCheap(t *testing.T) {
	t.Parallel()
	var checks atomic.Int64
	keys := &countedKeys{}
	srv, err := NewHandler(Config{Auth: keys, APIEnabled: true,
		Limits: Limits{UnknownKeyRate: 1, UnknownKeyBurst: 5},
		Ready: func(context.Context) (map[string]any, error) {
			checks.Add(1)
			return map[string]any{"mode": "all"}, nil
		}})
	require.NoError(t, err)
	get := func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
		req.RemoteAddr = "192.0.2.1:1234"
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec
	}
	const n = 100
	for range n {
		rec := get("hk_unknown")
		require.Equal(t, http.StatusOK, rec.Code)
		require.JSONEq(t, `{"status":"ready"}`, rec.Body.String(), "an unknown key sees the status only")
	}
	require.Less(t, checks.Load(), int64(n/2), "readiness checks are shared, not one per request")
	require.EqualValues(t, 5, keys.lookups.Load(), "the address's budget of unknown keys bounds the lookups")

	// The admin key is looked up once, then cached; another address still
	// has its budget.
	req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
	req.RemoteAddr = "198.51.100.7:1"
	req.Header.Set("Authorization", "Bearer hk_admin")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	require.Contains(t, rec.Body.String(), `"mode":"all"`, "an admin key sees the details")
}
