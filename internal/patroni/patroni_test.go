package patroni_test

import (
	"bufio"
	"context"
	"database/sql"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"hearth/internal/database"
	"hearth/internal/patroni"
)

// failoverBound is how long writes may fail after the primary is lost: the
// leader key expires TTL after its last renewal, a loop later the standby
// promotes, and a new connection finds it; the margin is for a loaded
// machine.
const failoverBound = 3*patroni.TTL + 30*time.Second

// opTimeout is each write's deadline, as Hearth's calls carry one: room for
// a pooled connection's check, then a connection attempt to a silent first
// host before the next.
const opTimeout = 3 * database.ConnectTimeout

// Hearth's pool, opened once on the multi-host URL, follows the primary
// without being reopened: through the primary's freeze (every process of
// it stopped, as in a paused machine: its connections must be abandoned,
// not waited on until it comes back), a switchover, and the primary's
// loss. Synchronous mode loses no acknowledged write.
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
	// connection of the same URL, each under its deadline.
	write := func() error {
		ctx1, cancel1 := context.WithTimeout(ctx, opTimeout)
		defer cancel1()
		if _, err := pool.ExecContext(ctx1, `INSERT INTO writes VALUES ($1)`, n+1); err != nil {
			return err
		}
		n++
		ctx2, cancel2 := context.WithTimeout(ctx, opTimeout)
		defer cancel2()
		cfg, err := database.ParseConfig(url)
		if err != nil {
			return err
		}
		conn, err := database.Connect(ctx2, cfg)
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx2))
		if _, err := conn.Exec(ctx2, `INSERT INTO writes VALUES ($1)`, n+1); err != nil {
			return err
		}
		n++
		return nil
	}
	require.NoError(t, write())
	awaitPrimary(t, c, 0) // the first node bootstraps the cluster
	requireStandbyHas(t, c, n)

	// The primary is the URL's first host: every new connection tries it
	// first, and must pass over it within its connect timeout.
	c.Freeze(0)
	start := time.Now()
	awaitWrite(t, write, failoverBound+2*opTimeout)
	t.Logf("writes resumed %v after the primary froze", time.Since(start).Round(time.Millisecond))
	awaitPrimary(t, c, 1)
	c.Thaw(0)
	require.NoError(t, c.AwaitReady(ctx)) // demoted, it follows the new primary
	requireStandbyHas(t, c, n)

	require.NoError(t, c.Switchover(ctx, 0))
	awaitWrite(t, write, failoverBound) // the old primary restarts as a standby: its sessions end
	requireStandbyHas(t, c, n)

	c.Kill(0)
	start = time.Now()
	awaitWrite(t, write, failoverBound)
	t.Logf("writes resumed %v after the primary was killed", time.Since(start).Round(time.Millisecond))
	awaitPrimary(t, c, 1)
	var count int
	require.NoError(t, pool.QueryRowContext(ctx, `SELECT count(*) FROM writes`).Scan(&count))
	require.Equal(t, n, count, "every acknowledged write survived (synchronous mode)")
}

// awaitPrimary waits until Patroni reports node i as the running leader
// (its member state may trail the promotion by a loop).
func awaitPrimary(t *testing.T, c *patroni.Cluster, i int) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p, err := c.Primary(context.Background())
		assert.NoError(ct, err)
		assert.Equal(ct, i, p)
	}, failoverBound, 100*time.Millisecond)
}

func awaitWrite(t *testing.T, write func() error, bound time.Duration) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) { // reports the last attempt's error
		assert.NoError(c, write())
	}, bound, 200*time.Millisecond, "no write succeeded within %v", bound)
}

// requireStandbyHas checks that the standby holds the n rows written: the
// primary acknowledged each once the synchronous standby had it.
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
	}, time.Minute, 100*time.Millisecond, "the standby has not all %d rows", n)
}

// No process of the cluster outlives the process that started it, even
// one killed without a chance to call Stop: the test runs itself as a
// child that starts a cluster, kills the child, and waits until nothing
// names the cluster's directory any more.
func TestNoProcessOutlivesItsStarter(t *testing.T) {
	if os.Getenv("HEARTH_PATRONI_CHILD") != "" {
		c, err := patroni.Start(context.Background(), patroni.Options{Install: true})
		require.NoError(t, err)
		os.Stdout.WriteString("dir " + c.Dir() + "\n")
		select {} // until killed
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoProcessOutlivesItsStarter$", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), "HEARTH_PATRONI_CHILD=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var dir string
	for sc := bufio.NewScanner(out); sc.Scan(); {
		if d, ok := strings.CutPrefix(sc.Text(), "dir "); ok {
			dir = d
			break
		}
	}
	require.NotEmpty(t, dir, "the child started no cluster")
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NotEmpty(t, processesNaming(dir), "the cluster runs")

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Empty(c, processesNaming(dir), "processes left") },
		30*time.Second, 100*time.Millisecond)
}

// processesNaming lists the command lines that name dir.
func processesNaming(dir string) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if line := strings.ReplaceAll(string(b), "\x00", " "); strings.Contains(line, dir+"/") {
			found = append(found, e.Name()+": "+line)
		}
	}
	return found
}
