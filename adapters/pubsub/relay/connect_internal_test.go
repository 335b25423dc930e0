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

// RELAY_NATS_URL may carry a password: the line that says the connection
// is back after a NATS restart names the server without it.
func TestReconnectLogHidesTheNATSPassword(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	// A nats-server without authorisation accepts any user and password.
	url := strings.Replace(srv.URL(), "nats://", "nats://relay:natsPASSWORD@", 1)
	var logs harness.SyncBuffer
	r := &Relay{cfg: Config{NATSURL: url}}
	nc, err := r.connect(slog.New(slog.NewJSONHandler(&logs, nil)))
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, srv.Restart(t.Context()))
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "NATS connection restored") },
		20*time.Second, 20*time.Millisecond)
	require.NotContains(t, logs.String(), "natsPASSWORD")
	require.Contains(t, logs.String(), "127.0.0.1", "the server is named")
}

// A user without a password in RELAY_NATS_URL is NATS's token
// (nats://TOKEN@host, nats.go sends it as auth_token): the line names the
// server without it either. url.URL.Redacted masks a password only.
func TestReconnectLogHidesTheNATSToken(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	// A nats-server without authorisation accepts any token.
	url := strings.Replace(srv.URL(), "nats://", "nats://natsTOKEN@", 1)
	var logs harness.SyncBuffer
	r := &Relay{cfg: Config{NATSURL: url}}
	nc, err := r.connect(slog.New(slog.NewJSONHandler(&logs, nil)))
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, srv.Restart(t.Context()))
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "NATS connection restored") },
		20*time.Second, 20*time.Millisecond)
	require.NotContains(t, logs.String(), "natsTOKEN")
	require.Contains(t, logs.String(), "127.0.0.1", "the server is named")
}
