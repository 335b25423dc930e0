package projector

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"hearth/internal/database"
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
