package relay

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/harness"
	"hearth/internal/natstest"
)

// RELAY_NATS_URL may carry credentials: the line that says the connection
// is back after a NATS restart names the server without them. A password,
// and a user without a password, which is NATS's token (nats://TOKEN@host,
// nats.go sends it as auth_token) and which url.URL.Redacted leaves as it
// is. A nats-server without authorisation accepts any of them.
func TestReconnectLogHidesTheNATSCredentials(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct{ userinfo, secret string }{
		"password": {"relay:natsPASSWORD@", "natsPASSWORD"},
		"token":    {"natsTOKEN@", "natsTOKEN"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := natstest.Start(t)
			url := strings.Replace(srv.URL(), "nats://", "nats://"+c.userinfo, 1)
			var logs harness.SyncBuffer
			r := &Relay{cfg: Config{NATSURL: url}}
			nc, err := r.connect(slog.New(slog.NewJSONHandler(&logs, nil)))
			require.NoError(t, err)
			defer nc.Close()
			require.NoError(t, srv.Restart(t.Context()))
			require.Eventually(t, func() bool { return strings.Contains(logs.String(), "NATS connection restored") },
				20*time.Second, 20*time.Millisecond)
			require.NotContains(t, logs.String(), c.secret)
			require.Contains(t, logs.String(), "127.0.0.1", "the server is named")
		})
	}
}
