package projector

import (
	"context"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"hearth/internal/database"
	"hearth/internal/harness"
	"hearth/internal/pgcluster"
	"hearth/internal/pgtest"
)

// The LISTEN session is dialled as every Hearth connection is
// (database.ParseConfig): a server that goes silent is left after
// database.SilenceBound and the notifier reconnects (through a multi-host
// URL, to the new primary), instead of waiting on TCP's retries.
func TestNotifierAbandonsASilentServer(t *testing.T) {
	t.Parallel()
	n, err := NewNotifier(pgtest.NewDB(t).EventStore, nil)
	require.NoError(t, err)
	conn, err := pgx.ConnectConfig(t.Context(), n.cfg)
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(t.Context()))
	require.Equal(t, NotifyApplicationName, conn.Config().RuntimeParams["application_name"])
	ms := pgtest.Sockopt(t, conn.PgConn().Conn(), syscall.IPPROTO_TCP, pgtest.TCPUserTimeout)
	require.Equal(t, int(database.SilenceBound/time.Millisecond), ms)
}

// A server that goes silent while the LISTEN session waits (its processes
// stopped: its kernel acknowledges, so no TCP timeout fires) is noticed by
// the session's check after listenQuiet, and left: the notifier
// reconnects instead of waiting for notifications that will not come.
func TestNotifierLeavesAFrozenServer(t *testing.T) {
	t.Parallel()
	cluster, err := pgcluster.Start(t.Context(), pgcluster.Options{Fast: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop() })
	logs := &harness.SyncBuffer{}
	n, err := NewNotifier(cluster.URL("postgres"), slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "listening") }, time.Minute, 10*time.Millisecond)

	thaw, err := cluster.Freeze()
	require.NoError(t, err)
	t.Cleanup(thaw)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "notification connection silent; reconnecting") },
		time.Minute, 10*time.Millisecond, "the LISTEN session leaves the frozen server")
	cancel()
	thaw()
	<-done
}
