package httpport

import (
	"bytes"
	"crypto/sha256"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/access"
)

// checkingKeys is keys that also makes key checks (no transaction runs
// them here: the handlers below end before any).
type checkingKeys struct{ keys }

func (checkingKeys) KeyCheck(access.Principal, string) *access.KeyCheck { return &access.KeyCheck{} }

// A handler that panics in a write whose key was not looked up first: the
// gate answers for the key, so recoverPanics' 500 goes only to a key that
// works, and a key that no longer works gets its 401 (and is forgotten).
func TestKeyGateAnswersAPanicForTheKey(t *testing.T) {
	now := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	p := access.Principal{KeyID: "1", MerchantID: "m", Role: access.Operator}
	for _, tc := range []struct {
		name   string
		works  bool
		status int
	}{{"the key works", true, http.StatusInternalServerError}, {"the key was revoked", false, http.StatusUnauthorized}} {
		t.Run(tc.name, func(t *testing.T) {
			store := checkingKeys{keys{}}
			if tc.works {
				store.keys["secret"] = p
			}
			var logged bytes.Buffer
			s := &server{Config: Config{Auth: store, Now: func() time.Time { return now }},
				log: slog.New(slog.NewTextHandler(&logged, nil)), limits: newLimiter(Limits{}, nil), keyHits: newKeyCache(0)}
			hash := sha256.Sum256([]byte("secret"))
			s.keyHits.put(hash, p, now) // found working a moment ago
			h := s.recoverPanics(s.auth(true, access.Operator)(func(w http.ResponseWriter, r *http.Request) error {
				require.NotNil(t, access.PendingKeyCheck(r.Context()), "not looked up first")
				w.Header().Set("Location", "/v1/orders/x")
				panic("boom")
			}))
			req := httptest.NewRequest(http.MethodPost, "/v1/orders", nil)
			req.Header.Set("Authorization", "Bearer secret")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			require.Equal(t, tc.status, rec.Code, rec.Body.String())
			require.Empty(t, rec.Header().Get("Location"))
			require.Contains(t, logged.String(), "handler panicked")
			_, _, hinted := s.keyHits.hint(hash, now)
			require.Equal(t, tc.works, hinted, "a key that no longer works is forgotten")
		})
	}
}
