package database_test

import (
	"context"
	"fmt"
	"net"
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

// Every connection Hearth dials, pooled or dedicated, carries keepalives
// and TCP_USER_TIMEOUT, so that a server whose machine went silent is left
// after about database.SilenceBound instead of TCP's retries.
func TestConnectionsAbandonASilentNetwork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDB(t).EventStore

	db, err := database.OpenSQL(ctx, url, 1, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, database.WithConn(ctx, db, func(conn *pgx.Conn) error {
		requireHardened(t, conn.PgConn().Conn())
		return nil
	}))

	cfg, err := database.ParseConfig(url) // what the leadership and LISTEN sessions dial with
	require.NoError(t, err)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	requireHardened(t, conn.PgConn().Conn())
	require.Equal(t, database.ConnectTimeout, cfg.ConnectTimeout)
}

func requireHardened(t *testing.T, c net.Conn) {
	t.Helper()
	opt := func(level, name int) int { return pgtest.Sockopt(t, c, level, name) }
	require.Equal(t, 1, opt(syscall.SOL_SOCKET, syscall.SO_KEEPALIVE), "keepalives on")
	require.Equal(t, int(database.KeepaliveIdle/time.Second), opt(syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE))
	require.Equal(t, int(database.KeepaliveInterval/time.Second), opt(syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL))
	require.Equal(t, int(database.SilenceBound/time.Millisecond), opt(syscall.IPPROTO_TCP, pgtest.TCPUserTimeout))
}

// A URL may name several hosts: pgx tries them in order, and with
// target_session_attrs=read-write keeps the first that accepts writes. A
// host that refuses is passed over, by the pools and by the dedicated
// sessions alike.
func TestMultiHostURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDB(t).EventStore
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	dead, err := harness.FreePort() // nothing listens there
	require.NoError(t, err)
	multi := strings.Replace(url, fmt.Sprintf("127.0.0.1:%d", cfg.Port), fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", dead, cfg.Port), 1) +
		"&target_session_attrs=read-write"

	db, err := database.OpenWith(ctx, multi, 2, database.Options{ApplicationName: "multi-host"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	var name string
	require.NoError(t, db.QueryRowContext(ctx, `SELECT current_setting('application_name')`).Scan(&name))
	require.Equal(t, "multi-host", name)

	dcfg, err := database.ParseConfig(multi)
	require.NoError(t, err)
	require.Equal(t, uint16(dead), dcfg.Port, "the first host first")
	require.Len(t, dcfg.Fallbacks, 1, "then the second")
	conn, err := pgx.ConnectConfig(ctx, dcfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	require.Equal(t, uint16(cfg.Port), conn.PgConn().Conn().RemoteAddr().(*net.TCPAddr).AddrPort().Port())
}

// A server whose processes are all stopped (SIGSTOP) on a machine that
// still runs is answered for by its kernel, so no TCP timeout fires: what
// ends the wait is the pool's bounded check before reuse, the connect
// timeout, and the callers' deadlines. None of them may hang.
func TestFrozenServerIsAbandoned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Fast: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop() })
	url := cluster.URL("postgres")

	// A pool whose connections are checked on every reuse (after 1 ns of
	// idleness), so the test need not wait out pgx's second.
	db, err := database.OpenSQLPingingAfter(ctx, url, 2, time.Nanosecond)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	held, err := db.Conn(ctx) // an open connection, held across the freeze
	require.NoError(t, err)
	t.Cleanup(func() { _ = held.Close() })
	require.NoError(t, held.PingContext(ctx))
	require.NoError(t, db.PingContext(ctx)) // and one idle in the pool
	cfg, err := database.ParseConfig(url)
	require.NoError(t, err)
	dedicated, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = dedicated.Close(ctx) })

	thaw := freeze(t, cluster)
	t.Cleanup(thaw)

	// The bound of each path: its own timeouts, with a wide margin for a
	// loaded machine; the test's own limit is far beyond it, and a path
	// that hangs reaches that.
	const margin = 10 * time.Second
	callDeadline := 2 * time.Second
	checks := []struct {
		name  string
		bound time.Duration
		call  func() error
	}{
		{"pooled connection, reused", database.CheckTimeout + 2*database.ConnectTimeout + margin, func() error {
			return db.QueryRowContext(context.Background(), `SELECT 1`).Scan(new(int)) // no deadline of the caller's
		}},
		{"open pooled connection, with a deadline", callDeadline + margin, func() error {
			ctx, cancel := context.WithTimeout(ctx, callDeadline)
			defer cancel()
			return held.QueryRowContext(ctx, `SELECT 1`).Scan(new(int))
		}},
		{"new dedicated connection", database.ConnectTimeout + margin, func() error {
			c, err := pgx.ConnectConfig(context.Background(), cfg)
			if err == nil {
				_ = c.Close(ctx)
			}
			return err
		}},
		{"open dedicated connection, with a deadline", callDeadline + margin, func() error {
			ctx, cancel := context.WithTimeout(ctx, callDeadline)
			defer cancel()
			_, err := dedicated.Exec(ctx, `SELECT 1`)
			return err
		}},
	}
	for _, c := range checks {
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- c.call() }()
		select {
		case err := <-done:
			require.Error(t, err, c.name)
			require.Less(t, time.Since(start), c.bound, c.name)
		case <-time.After(c.bound + time.Minute):
			thaw() // let the hung call end
			t.Fatalf("%s: still waiting on the frozen server after %v", c.name, time.Since(start))
		}
	}
	thaw()
	require.NoError(t, db.QueryRowContext(ctx, `SELECT 1`).Scan(new(int)), "the pool works again once the server does")
}

// freeze freezes cluster (pgcluster.Cluster.Freeze); thaw is idempotent.
func freeze(t *testing.T, cluster *pgcluster.Cluster) (thaw func()) {
	t.Helper()
	thaw, err := cluster.Freeze()
	require.NoError(t, err)
	return thaw
}
