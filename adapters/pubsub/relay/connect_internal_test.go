package relay

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/natstest"
)

// lockedBuffer is a log's output, written by the NATS client's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// RELAY_NATS_URL may carry a password: the line that says the connection
// is back after a NATS restart names the server without it.
func TestReconnectLogHidesTheNATSPassword(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	// A nats-server without authorisation accepts any user and password.
	url := strings.Replace(srv.URL(), "nats://", "nats://relay:natsPASSWORD@", 1)
	var logs lockedBuffer
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
