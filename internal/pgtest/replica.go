package pgtest

import (
	"context"
	"database/sql"
	"log/slog"
	"net/url"
	"os"
	"testing"
	"time"

	"hearth/internal/pgcluster"
)

// StartReplica starts a streaming replica (hot standby) of the test
// binary's cluster, with every database the cluster has now and will have;
// it is stopped and removed when t ends.
func StartReplica(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	if cluster == nil {
		t.Fatal("pgtest: call pgtest.Main from TestMain")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r, err := cluster.StartReplica(ctx)
	if err != nil {
		t.Fatalf("pgtest: start replica: %v", err)
	}
	// The cluster commits without waiting for the WAL flush
	// (synchronous_commit off), and a primary streams only flushed WAL: a
	// commit reaches the replica when the WAL writer next flushes, every
	// wal_writer_delay (200ms by default). Flush more often while replicas
	// run, so replicas follow within milliseconds, as on a durable primary.
	admin, err := sql.Open("pgx", cluster.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, stmt := range []string{`ALTER SYSTEM SET wal_writer_delay = '10ms'`, `SELECT pg_reload_conf()`} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("pgtest: %s: %v", stmt, err)
		}
	}
	t.Cleanup(func() { _ = r.Stop() })
	return r
}

// StartCluster starts a cluster of its own (another system identifier),
// stopped and removed when t ends.
func StartCluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Fast: true, Install: true,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatalf("pgtest: start cluster: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// On is dbURL (a URL of the test cluster) on server c instead: the same
// database, user and parameters.
func On(c *pgcluster.Cluster, dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		panic("pgtest.On: " + err.Error())
	}
	base, err := url.Parse(c.URL("postgres"))
	if err != nil {
		panic("pgtest.On: " + err.Error())
	}
	u.Host = base.Host
	return u.String()
}
