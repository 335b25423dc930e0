package database_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"hearth/internal/database"
	"hearth/internal/harness"
	"hearth/internal/pgcluster"
	"hearth/internal/pgtest"
)

// A host list with no primary is bad input Hearth waits out: Open keeps
// trying with backoff, and says each time which hosts it tried and what
// each answered, until one accepts writes.
func TestNoPrimaryKeepsTrying(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDB(t).EventStore
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	admin := pgtest.Open(t, url)
	_, err = admin.ExecContext(ctx, "ALTER DATABASE "+cfg.Database+" SET default_transaction_read_only = on") // its sessions answer read-only, as a standby's
	require.NoError(t, err)
	dead, err := harness.FreePort()
	require.NoError(t, err)
	live := fmt.Sprintf("127.0.0.1:%d", cfg.Port)
	multi := strings.Replace(url, live, fmt.Sprintf("127.0.0.1:%d,%s", dead, live), 1) + "&target_session_attrs=read-write"

	logs := &harness.SyncBuffer{}
	opened := make(chan error, 1)
	go func() {
		db, err := database.OpenWith(ctx, multi, 2, database.Options{Log: slog.New(slog.NewTextHandler(logs, nil))})
		if err == nil {
			_ = db.Close()
		}
		opened <- err
	}()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out := logs.String()
		assert.Contains(c, out, "attempt=2", "tried again")
		assert.Contains(c, out, fmt.Sprintf("127.0.0.1:%d: dial error", dead), "the host that refused, and its answer")
		assert.Contains(c, out, live+": read-only", "the host that answered read-only")
	}, time.Minute, 10*time.Millisecond)
	select {
	case err := <-opened:
		t.Fatalf("Open gave up while no host was primary: %v", err)
	default:
	}

	_, err = admin.ExecContext(ctx, "ALTER DATABASE "+cfg.Database+" SET default_transaction_read_only = off") // promoted
	require.NoError(t, err)
	require.NoError(t, <-opened, "Open returns once a host accepts writes")

	// A database that does not exist is not a failover: it ends Open at once.
	bad := strings.Replace(multi, "/"+cfg.Database+"?", "/no_such_database?", 1)
	require.NotEqual(t, multi, bad)
	_, err = database.OpenWith(ctx, bad, 1, database.Options{Log: slog.New(slog.NewTextHandler(logs, nil))})
	require.Error(t, err)
	var none *database.NoPrimaryError
	require.False(t, errors.As(err, &none), "%v", err)
}

// A pooled connection to a host other than the newest primary is not
// reused: once a connection of the process found the primary elsewhere,
// the pool drops its connections to the old one unused (a primary that
// resumed after a freeze still accepts writes until Patroni demotes it)
// and dials the new one.
func TestPoolLeavesAnOldPrimary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := startServer(t), startServer(t)
	url := twoHosts(a, b)
	pool, err := database.OpenSQL(ctx, url, 2, "old-primary")
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Close() })
	require.Equal(t, a.Port(), serverPort(t, pool), "the first host, while it is primary")

	setReadOnly(t, a, true) // new sessions on a answer read-only; the pool's stays open
	cfg, err := database.ParseConfig(url)
	require.NoError(t, err)
	conn, err := database.Connect(ctx, cfg) // a session of the process finds the primary on b
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	require.Equal(t, b.Port(), conn.PgConn().Conn().RemoteAddr().(*net.TCPAddr).Port)

	require.Equal(t, b.Port(), serverPort(t, pool), "the pool left its connection to the old primary")
}

// A frozen primary (its processes stopped: its kernel accepts connections
// that nothing answers) found silent by a pooled connection's check is
// passed over by every later connection of the process: tried last, and
// within a second only, while it stays silent.
func TestFrozenPrimaryIsPassedOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := startServer(t), startServer(t)
	url := twoHosts(a, b)
	pool, err := database.OpenSQLPingingAfter(ctx, url, 2, time.Nanosecond)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Close() })
	require.Equal(t, a.Port(), serverPort(t, pool))

	setReadOnly(t, b, true) // no primary but the frozen one
	thaw := freeze(t, a)
	t.Cleanup(thaw)
	err = pool.QueryRowContext(ctx, `SELECT 1`).Scan(new(int)) // no deadline of the caller's: the check's own
	var none *database.NoPrimaryError
	require.ErrorAs(t, err, &none)
	require.Contains(t, none.Error(), fmt.Sprintf("127.0.0.1:%d: no answer within 1s", a.Port()),
		"the check found a silent: the new connection tried it last, within a second")
	require.Contains(t, none.Error(), fmt.Sprintf("127.0.0.1:%d: read-only", b.Port()))

	setReadOnly(t, b, false) // b promoted
	require.Equal(t, b.Port(), serverPort(t, pool), "the pool reaches the new primary while the old one is frozen")
	thaw()
}

// A caller whose deadline is shorter than the connect timeout, meeting a
// frozen primary, gives up; the host is silent all the same, so the next
// such caller tries the new primary first and reaches it.
func TestCallerDeadlineFindsAFrozenPrimarySilent(t *testing.T) {
	t.Parallel()
	a, b := startServer(t), startServer(t)
	cfg, err := database.ParseConfig(twoHosts(a, b))
	require.NoError(t, err)
	connect := func() (*pgx.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), database.ConnectTimeout/2)
		defer cancel()
		return database.Connect(ctx, cfg)
	}
	setReadOnly(t, b, true)
	conn, err := connect()
	require.NoError(t, err)
	require.Equal(t, a.Port(), conn.PgConn().Conn().RemoteAddr().(*net.TCPAddr).Port, "a is the primary")
	require.NoError(t, conn.Close(context.Background()))

	thaw := freeze(t, a)
	t.Cleanup(thaw)
	setReadOnly(t, b, false) // b promoted
	_, err = connect()
	require.ErrorIs(t, err, context.DeadlineExceeded, "the newest primary first: the frozen one took the whole deadline")
	conn, err = connect()
	require.NoError(t, err, "the frozen host was found silent: the new primary first")
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	require.Equal(t, b.Port(), conn.PgConn().Conn().RemoteAddr().(*net.TCPAddr).Port)
	thaw()
}

func startServer(t *testing.T) *pgcluster.Cluster {
	t.Helper()
	c, err := pgcluster.Start(context.Background(), pgcluster.Options{Fast: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// twoHosts is a multi-host URL naming a, then b.
func twoHosts(a, b *pgcluster.Cluster) string {
	return strings.Replace(a.URL("postgres"), fmt.Sprintf("127.0.0.1:%d", a.Port()), fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", a.Port(), b.Port()), 1) +
		"&target_session_attrs=read-write"
}

// setReadOnly makes c's new sessions answer read-only (as a standby's do),
// or not.
func setReadOnly(t *testing.T, c *pgcluster.Cluster, on bool) {
	t.Helper()
	db, err := sql.Open("pgx", c.URL("postgres"))
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(fmt.Sprintf("ALTER SYSTEM SET default_transaction_read_only = %t", on))
	require.NoError(t, err)
	_, err = db.Exec("SELECT pg_reload_conf()")
	require.NoError(t, err)
}

func serverPort(t *testing.T, db *sql.DB) int {
	t.Helper()
	var port int
	require.NoError(t, db.QueryRow(`SELECT inet_server_port()`).Scan(&port))
	return port
}

// Every Hearth connection writes, or takes locks only the primary's count
// for: through a multi-host URL only a host that accepts writes will do,
// whether or not the URL says target_session_attrs=read-write. Left to
// pgx's default (libpq's "any"), a connection keeps the first host that
// answers: a standby named first, or, after a failover, the old primary
// restarted as one, which this process has learnt to try first; every
// write then fails until the URL is fixed.
func TestMultiHostURLKeepsThePrimaryWithoutTargetSessionAttrs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDB(t).EventStore
	replica := pgtest.StartReplica(t)
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	rcfg, err := pgx.ParseConfig(replica.URL("postgres"))
	require.NoError(t, err)
	primary := fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
	require.Contains(t, url, primary)
	standbyFirst := strings.Replace(url, primary, fmt.Sprintf("%s:%d,%s", rcfg.Host, rcfg.Port, primary), 1)

	for _, multi := range []string{standbyFirst, standbyFirst + "&target_session_attrs=any"} {
		db, err := database.Open(ctx, multi, 2)
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		var inRecovery bool
		require.NoError(t, db.QueryRowContext(ctx, `SELECT pg_is_in_recovery()`).Scan(&inRecovery))
		require.False(t, inRecovery, "the pool keeps the primary: %s", multi)
		_, err = db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS written (n int)`)
		require.NoError(t, err, "a write goes to the primary")

		dcfg, err := database.ParseConfig(multi) // the leadership and LISTEN sessions'
		require.NoError(t, err)
		conn, err := database.Connect(ctx, dcfg)
		require.NoError(t, err)
		require.NoError(t, conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&inRecovery))
		_ = conn.Close(ctx)
		require.False(t, inRecovery, "a dedicated session keeps the primary: %s", multi)
	}
}
