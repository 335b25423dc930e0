package replicas

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"hearth/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// serverPort is a "read model" that answers which server it ran on.
type serverPort struct{ db *bun.DB }

func (s serverPort) port(ctx context.Context) (int, error) {
	var port int
	err := s.db.QueryRowContext(ctx, `SELECT inet_server_port()`).Scan(&port)
	return port, err
}

// openSet opens a Set of replicas of primaryURL. No monitor runs (Run is
// not called): only Open's check and the test's own.
func openSet(t *testing.T, primaryURL string, replicaURLs ...string) (*Set, *bun.DB, *Metrics) {
	t.Helper()
	primary := pgtest.Open(t, primaryURL)
	m, err := NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	set, err := Open(t.Context(), Config{Setting: "READ_REPLICA_URLS", PrimarySetting: "DATABASE_URL", Primary: primary,
		URLs: replicaURLs, MaxLag: time.Minute, CheckEvery: time.Hour, Metrics: m})
	require.NoError(t, err)
	t.Cleanup(set.Close)
	return set, primary, m
}

// A read sent to a replica that stopped since its last check is made again
// on the primary, the replica is skipped at once, and the rest of the GET
// reads the primary; the next check that finds it answering brings it back.
func TestReadsFallBackToThePrimary(t *testing.T) {
	urls := pgtest.NewDB(t)
	replica := pgtest.StartReplica(t)
	ctx := t.Context()
	set, primary, m := openSet(t, urls.EventStore, pgtest.On(replica, urls.EventStore))
	rep := set.Replicas()[0]
	require.True(t, rep.Usable(), "Open's check found the replica usable")
	rt, err := Each(set, m, primary, func(db *bun.DB) (serverPort, error) { return serverPort{db}, nil })
	require.NoError(t, err)
	read := func(ctx context.Context) int {
		port, err := call(ctx, rt, func(ctx context.Context, s serverPort) (int, error) { return s.port(ctx) })
		require.NoError(t, err)
		return port
	}
	get := func() context.Context { return context.WithValue(ctx, choiceKey{}, &choice{}) }

	require.Equal(t, replica.Port(), read(get()), "a GET reads the replica")
	require.NoError(t, replica.Halt(ctx))
	g := get()
	require.Equal(t, pgtest.Cluster().Port(), read(g), "the primary answers the read the replica could not")
	require.False(t, rep.Usable(), "the replica is skipped at once")
	require.True(t, choiceOf(g).primary, "the rest of the GET reads the primary")
	require.Equal(t, pgtest.Cluster().Port(), read(get()), "the next GET reads the primary")

	set.check(ctx)
	require.False(t, rep.Usable(), "a check of a stopped replica keeps it skipped")
	require.NoError(t, replica.Resume(ctx))
	set.check(ctx)
	require.True(t, rep.Usable(), "a check that finds it answering brings it back")
	require.Equal(t, replica.Port(), read(get()))
	require.Equal(t, pgtest.Cluster().Port(), read(ctx), "a read outside a GET reads the primary")
}

// The lag in time is the age of the oldest of the primary's positions the
// replica has not replayed; in bytes, the distance to the primary's
// position now. Behind the oldest position kept, the age is a lower bound
// only: not known.
func TestLag(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &Set{samples: []sample{{t0.Add(-3 * time.Second), 100}, {t0.Add(-2 * time.Second), 200}, {t0.Add(-time.Second), 300}}}
	for _, tc := range []struct {
		replayed uint64
		bytes    uint64
		lag      time.Duration
		unknown  bool
	}{
		{replayed: 300, bytes: 0, lag: 0},
		{replayed: 400, bytes: 0, lag: 0},
		{replayed: 250, bytes: 50, lag: time.Second},
		{replayed: 200, bytes: 100, lag: time.Second},
		{replayed: 150, bytes: 150, lag: 2 * time.Second},
		{replayed: 100, bytes: 200, lag: 2 * time.Second},
		{replayed: 50, bytes: 250, lag: 3 * time.Second, unknown: true},
	} {
		bytes, lag, known := s.lag(tc.replayed, 300, t0)
		require.Equal(t, tc.bytes, bytes, "replayed %d", tc.replayed)
		require.Equal(t, tc.lag, lag, "replayed %d", tc.replayed)
		require.Equal(t, !tc.unknown, known, "replayed %d", tc.replayed)
	}
}

func TestParseLSN(t *testing.T) {
	lsn, err := parseLSN("16/B374D848")
	require.NoError(t, err)
	require.Equal(t, uint64(0x16)<<32|0xB374D848, lsn)
	for _, bad := range []string{"", "16", "x/1", "1/100000000"} {
		_, err := parseLSN(bad)
		require.Error(t, err, bad)
	}
}

// A replica setting may name a primary. The primary Hearth writes to is
// one more read path; another primary of the cluster (here a replica
// promoted beside it: a split brain, or a former primary not yet demoted)
// misses the writes made since, and is skipped.
func TestPrimariesAsReplicas(t *testing.T) {
	urls := pgtest.NewDB(t)
	replica := pgtest.StartReplica(t)
	ctx := t.Context()
	set, _, _ := openSet(t, urls.EventStore, urls.EventStore, pgtest.On(replica, urls.EventStore))
	itself, promoted := set.Replicas()[0], set.Replicas()[1]
	require.True(t, itself.Usable(), "the primary itself serves reads")
	require.True(t, promoted.Usable(), "a streaming replica serves reads")

	_, err := pgtest.Open(t, replica.URL("postgres")).ExecContext(ctx, `SELECT pg_promote()`)
	require.NoError(t, err)
	set.check(ctx)
	require.True(t, itself.Usable(), "the primary itself still serves reads")
	require.False(t, promoted.Usable(), "another primary of the cluster is skipped")
}

// A replica that goes silent between two checks (its machine frozen: its
// kernel still answers TCP) does not hold a read until the request's
// deadline: the read has a bound of its own (callBound), after which the
// replica is skipped and the primary, healthy all along, answers within
// the time the request has left.
func TestAFrozenReplicasReadFallsBackToThePrimary(t *testing.T) {
	urls := pgtest.NewDB(t)
	replica := pgtest.StartReplica(t)
	ctx := t.Context()
	set, primary, m := openSet(t, urls.EventStore, pgtest.On(replica, urls.EventStore))
	rep := set.Replicas()[0]
	require.True(t, rep.Usable())
	rt, err := Each(set, m, primary, func(db *bun.DB) (serverPort, error) { return serverPort{db}, nil })
	require.NoError(t, err)
	get := func() context.Context { return context.WithValue(ctx, choiceKey{}, &choice{}) }
	port, err := call(get(), rt, func(ctx context.Context, s serverPort) (int, error) { return s.port(ctx) })
	require.NoError(t, err)
	require.Equal(t, replica.Port(), port, "a GET reads the replica")

	thaw, err := replica.Freeze()
	require.NoError(t, err)
	t.Cleanup(thaw)

	// The request's deadline (HTTP_WRITE_TIMEOUT in production).
	rctx, cancel := context.WithTimeout(get(), 6*time.Second)
	defer cancel()
	started := time.Now()
	port, err = call(rctx, rt, func(ctx context.Context, s serverPort) (int, error) { return s.port(ctx) })
	require.NoError(t, err, "a read a frozen replica does not answer is made on the healthy primary, in the time the request has left (after %v)", time.Since(started))
	require.Equal(t, pgtest.Cluster().Port(), port)
	require.False(t, rep.Usable(), "and the replica is skipped")
}

// A replica that is already further behind than MaxLag when the Set opens
// is skipped by Open's check: before it, the monitor has no earlier
// position of the primary to date the replica's by, and a lag measured
// against the one position it just sampled would be its milliseconds, not
// the hours a broken replica may be behind (stale answers, an erased
// customer's data among them, for the first MaxLag after each start). It is
// used once it has caught up.
func TestAReplicaAlreadyBehindAtOpenIsSkipped(t *testing.T) {
	urls := pgtest.NewDB(t)
	replica := pgtest.StartReplica(t)
	ctx := t.Context()
	primary := pgtest.Open(t, urls.EventStore)
	_, err := primary.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS replica_lag_probe (n int)`)
	require.NoError(t, err)
	onReplica := pgtest.Open(t, replica.URL("postgres"))
	_, err = onReplica.ExecContext(ctx, `SELECT pg_wal_replay_pause()`)
	require.NoError(t, err)
	_, err = primary.ExecContext(ctx, `INSERT INTO replica_lag_probe VALUES (1)`)
	require.NoError(t, err)
	// Longer than Open's settle waits for the paused replica to replay its
	// sample (checkTimeout): a lag measured against that one sample would be
	// about checkTimeout, within maxLag, and the replica used. With a
	// shorter maxLag that lag exceeds it too, and the test cannot tell.
	const maxLag = checkTimeout + time.Second
	// The lag is time itself: with its replay paused since the write, the
	// replica is further behind than maxLag once that much has passed.
	time.Sleep(maxLag + 100*time.Millisecond)

	m, err := NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	set, err := Open(ctx, Config{Setting: "READ_REPLICA_URLS", PrimarySetting: "DATABASE_URL", Primary: primary,
		URLs: []string{pgtest.On(replica, urls.EventStore)}, MaxLag: maxLag, CheckEvery: time.Hour, Metrics: m})
	require.NoError(t, err)
	t.Cleanup(set.Close)
	rep := set.Replicas()[0]
	require.False(t, rep.Usable(), "a replica paused behind for longer than MaxLag is skipped from Open's check on")
	rt, err := Each(set, m, primary, func(db *bun.DB) (serverPort, error) { return serverPort{db}, nil })
	require.NoError(t, err)
	port, err := call(context.WithValue(ctx, choiceKey{}, &choice{}), rt, func(ctx context.Context, s serverPort) (int, error) { return s.port(ctx) })
	require.NoError(t, err)
	require.Equal(t, pgtest.Cluster().Port(), port, "a GET reads the primary")

	_, err = onReplica.ExecContext(ctx, `SELECT pg_wal_replay_resume()`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { set.check(ctx); return rep.Usable() }, 30*time.Second, 10*time.Millisecond,
		"a replica that caught up is used")
}

// A replica URL names the primary's database: one that names another
// database of the cluster (here the read models' database, for the event
// store's replicas) passes the cluster's check and has the same lag, but
// would answer the GETs with another database's rows, or fail every one.
// It stops Open with an error naming the setting and both databases.
func TestAReplicaOfAnotherDatabaseIsRefused(t *testing.T) {
	urls := pgtest.NewSplitDBs(t)
	replica := pgtest.StartReplica(t)
	primary := pgtest.Open(t, urls.EventStore)
	m, err := NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	set, err := Open(t.Context(), Config{Setting: "READ_REPLICA_URLS", PrimarySetting: "DATABASE_URL", Primary: primary,
		URLs: []string{pgtest.On(replica, urls.ReadModel)}, MaxLag: time.Minute, CheckEvery: time.Hour, Metrics: m})
	if err == nil {
		set.Close()
	}
	require.Error(t, err, "a replica URL naming another database than the primary's is refused")
	esDB := urls.EventStore[strings.LastIndex(urls.EventStore, "/")+1:]
	esDB, _, _ = strings.Cut(esDB, "?")
	rmDB := urls.ReadModel[strings.LastIndex(urls.ReadModel, "/")+1:]
	rmDB, _, _ = strings.Cut(rmDB, "?")
	for _, want := range []string{"READ_REPLICA_URLS", "DATABASE_URL", esDB, rmDB} {
		require.Contains(t, err.Error(), want)
	}
}
