package patroni_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"hearth/internal/database"
	"hearth/internal/patroni"
)

// failoverBound is how long a write may fail after the primary is lost: the
// leader key expires TTL after its last renewal, a loop later the standby
// promotes, and a new connection finds it; the margin is for a loaded
// machine.
const failoverBound = 3*patroni.TTL + 30*time.Second

// The harness: a primary and a synchronous standby behind one multi-host
// URL, a switchover, and a failover after the primary is killed. Hearth's
// pool, opened once, follows the primary throughout, without being
// reopened.
func TestFailover(t *testing.T) {
	ctx := context.Background()
	c, err := patroni.Start(ctx, patroni.Options{Nodes: 2, Install: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Stop()) })
	url := c.URL("postgres")

	pool, err := database.OpenSQL(ctx, url, 4, "patroni-test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Close() })
	_, err = pool.ExecContext(ctx, `CREATE TABLE writes (n int PRIMARY KEY)`)
	require.NoError(t, err)

	n := 0
	// write inserts the next row through the pool, and through a new
	// connection of the same URL, each under a deadline, as Hearth's calls
	// are; it reports the first failure.
	write := func() error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := pool.ExecContext(ctx, `INSERT INTO writes VALUES ($1)`, n+1); err != nil {
			return err
		}
		cfg, err := database.ParseConfig(url)
		if err != nil {
			return err
		}
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		if _, err := conn.Exec(ctx, `INSERT INTO writes VALUES ($1)`, n+2); err != nil {
			return err
		}
		n += 2
		return nil
	}
	require.NoError(t, write())
	requireStandbyHas(t, c, n)

	first, err := c.Primary(ctx)
	require.NoError(t, err)
	other := 1 - first
	require.NoError(t, c.Switchover(ctx, other))
	primary, err := c.Primary(ctx)
	require.NoError(t, err)
	require.Equal(t, other, primary)
	awaitWrite(t, write, failoverBound) // the old primary restarts as a standby: its sessions end
	requireStandbyHas(t, c, n)

	c.Kill(primary)
	start := time.Now()
	awaitWrite(t, write, failoverBound)
	t.Logf("writes resumed %v after the primary was killed", time.Since(start).Round(time.Millisecond))
	now, err := c.Primary(ctx)
	require.NoError(t, err)
	require.Equal(t, first, now)
	var count int
	require.NoError(t, pool.QueryRowContext(ctx, `SELECT count(*) FROM writes`).Scan(&count))
	require.Equal(t, n, count, "every acknowledged write survived (synchronous mode)")
}

func awaitWrite(t *testing.T, write func() error, bound time.Duration) {
	t.Helper()
	var last error
	require.Eventually(t, func() bool {
		last = write()
		return last == nil
	}, bound, 200*time.Millisecond, "no write succeeded within %v: last error %v", bound, func() error { return last }())
}

// requireStandbyHas checks that the standby holds n rows: what the primary
// acknowledged, the synchronous standby had.
func requireStandbyHas(t *testing.T, c *patroni.Cluster, n int) {
	t.Helper()
	ctx := context.Background()
	primary, err := c.Primary(ctx)
	require.NoError(t, err)
	db, err := sql.Open("pgx", c.NodeURL(1-primary, "postgres"))
	require.NoError(t, err)
	defer db.Close()
	var count int
	require.Eventually(t, func() bool { // flushed there before the commit was acknowledged, replayed soon after
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return db.QueryRowContext(ctx, `SELECT count(*) FROM writes`).Scan(&count) == nil && count == n
	}, time.Minute, 100*time.Millisecond, "the standby has %d rows of %d", func() int { return count }())
}
