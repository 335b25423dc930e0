package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgcluster"
	"hearth/internal/pgtest"
)

// The read replicas' tests run on a streaming replica of the test cluster
// each (pgtest.StartReplica). They are not parallel: they stop, pause and
// slow their replica, and a base backup copies the whole cluster.

// onReplica is setup with reads on replica, checked every 20ms.
func onReplica(t *testing.T, urls pgtest.URLs, replica *pgcluster.Cluster, configure func(cfg *Config)) *api {
	t.Helper()
	return setupConfigured(t, urls, func(cfg *Config) {
		cfg.ReadReplicas = ReadReplicas{
			URLs: []string{pgtest.On(replica, urls.EventStore)}, ReadModelURLs: []string{pgtest.On(replica, urls.ReadModel)},
			MaxLag: 5 * time.Second, CheckEvery: 20 * time.Millisecond,
		}
		if configure != nil {
			configure(cfg)
		}
	}, nil)
}

// replicaName is how metrics name the read models' replica of a.
func (a *api) replicaName(replica *pgcluster.Cluster) string {
	db := a.cfg.ReadModelDatabaseURL[strings.LastIndex(a.cfg.ReadModelDatabaseURL, "/")+1:]
	db, _, _ = strings.Cut(db, "?")
	return fmt.Sprintf("127.0.0.1:%d/%s", replica.Port(), db)
}

// metric is the value of one series in /metrics (name with its labels, as
// Prometheus writes them), or -1 when it is not there.
func metric(metrics, series string) float64 {
	sc := bufio.NewScanner(strings.NewReader(metrics))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// awaitUsable waits until /metrics shows the replica usable (1) or skipped (0).
func (a *api) awaitUsable(replica *pgcluster.Cluster, usable float64, why string) {
	a.t.Helper()
	series := fmt.Sprintf("hearth_replica_usable{replica=%q}", a.replicaName(replica))
	require.Eventually(a.t, func() bool { return metric(a.metrics(), series) == usable }, 30*time.Second, 10*time.Millisecond,
		"%s: %s never became %v", why, series, usable)
}

// readsOn is how many read queries replica (or "primary") answered.
func (a *api) readsOn(server string) float64 {
	return max(metric(a.metrics(), fmt.Sprintf("hearth_read_queries_total{server=%q}", server)), 0)
}

// onServer runs SQL on the replica itself, outside Hearth.
func onServer(t *testing.T, c *pgcluster.Cluster, stmt string) {
	t.Helper()
	db := pgtest.Open(t, c.URL("postgres"))
	_, err := db.DB.ExecContext(t.Context(), stmt)
	require.NoError(t, err, stmt)
	require.NoError(t, db.Close())
}

// A write, then at once a GET naming its position through the replica, 100
// times: never older than the write. The replica applies each commit 50ms
// late (recovery_min_apply_delay), so a GET that did not wait for it would
// read the row before the write; and every one of them is answered by the
// replica (it showed the write within the wait), none by the primary.
func TestReadYourWritesThroughAReplica(t *testing.T) {
	for layout, newDBs := range pgtest.Layouts() {
		t.Run(layout, func(t *testing.T) {
			replica := pgtest.StartReplica(t)
			onServer(t, replica, `ALTER SYSTEM SET recovery_min_apply_delay = '50ms'`)
			onServer(t, replica, `SELECT pg_reload_conf()`)
			a := onReplica(t, newDBs(t), replica, func(cfg *Config) {
				// A wait long enough that the replica always shows the write
				// in time on a busy machine: a fallback to the primary would
				// not be stale either, but this test is about the replica.
				cfg.ConsistencyTimeout = 20 * time.Second
			})
			a.awaitUsable(replica, 1, "a streaming replica")
			name := a.replicaName(replica)
			waits := func(answered string) float64 {
				return max(metric(a.metrics(), fmt.Sprintf("hearth_replica_consistency_waits_total{answered=%q}", answered)), 0)
			}
			before, readsBefore := waits("replica"), a.readsOn(name)

			customerID := a.createCustomer(a.opA, "Ada Lovelace")
			created := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA,
				map[string]any{"customer_id": customerID, "amount_cents": 100})
			id := created.Body["id"].(string)
			position := positionOf(created.Body)
			for i := range 100 {
				header := auth(a.opA)
				header.Set("Consistency-Position", position)
				r, err := a.send(http.MethodGet, "/v1/orders/"+id, header, nil)
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, r.Status, "read %d: %s", i, r)
				require.Equal(t, i+1, intOf(r.Body["version"]), "read %d is older than its write: %s", i, r)
				require.Equal(t, "Ada Lovelace", r.Body["customer_name"], "read %d", i)
				require.Equal(t, "reached", r.Header.Get("Consistency-Status"), "read %d", i)
				if i == 99 {
					break
				}
				updated := a.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+id, a.opA, map[string]any{"notes": fmt.Sprint("note ", i)})
				position = positionOf(updated.Body)
			}
			require.Equal(t, float64(100), waits("replica")-before, "every read was answered by the replica")
			require.Zero(t, waits("primary"), "no read fell back to the primary")
			require.GreaterOrEqual(t, a.readsOn(name)-readsBefore, float64(100))
		})
	}
}

// A replica that stops is skipped by its next check: the GETs go on,
// answered by the primary, and the replica is used again once it is back.
// (A read that reaches a replica before a check noticed is sent to the
// primary: internal/replicas' TestReadsFallBackToThePrimary.)
func TestReplicaDownIsSkippedAndComesBack(t *testing.T) {
	replica := pgtest.StartReplica(t)
	a := onReplica(t, pgtest.NewDB(t), replica, nil)
	a.awaitUsable(replica, 1, "a streaming replica")
	name := a.replicaName(replica)
	id := a.createOrder(a.opA, a.createCustomer(a.opA, "Ada Lovelace"), 4200)
	a.awaitOrder(a.opA, id, 1)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.NoError(t, replica.Halt(ctx))
	a.awaitUsable(replica, 0, "a stopped replica")
	onPrimary, onReplica := a.readsOn("primary"), a.readsOn(name)
	a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+id, a.opA, nil)
	a.must(http.StatusOK, http.MethodGet, "/v1/orders", a.opA, nil)
	a.must(http.StatusOK, http.MethodGet, "/v1/customers", a.opA, nil)
	require.Greater(t, a.readsOn("primary"), onPrimary, "the primary answers while the replica is down")
	require.Equal(t, onReplica, a.readsOn(name), "nothing is sent to the replica while it is down")

	require.NoError(t, replica.Resume(ctx))
	a.awaitUsable(replica, 1, "a replica started again")
	onReplica = a.readsOn(name)
	a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+id, a.opA, nil)
	require.Greater(t, a.readsOn(name), onReplica, "the replica answers again")
}

// A replica further behind than READ_REPLICA_MAX_LAG is skipped, and used
// again once it has caught up: with its replay paused, an order written
// since is read (from the primary) without naming a position.
func TestReplicaFarBehindIsSkipped(t *testing.T) {
	replica := pgtest.StartReplica(t)
	a := onReplica(t, pgtest.NewDB(t), replica, func(cfg *Config) { cfg.ReadReplicas.MaxLag = 200 * time.Millisecond })
	a.awaitUsable(replica, 1, "a streaming replica")
	name := a.replicaName(replica)
	customerID := a.createCustomer(a.opA, "Ada Lovelace")

	onServer(t, replica, `SELECT pg_wal_replay_pause()`)
	id := a.createOrder(a.opA, customerID, 4200)
	a.awaitUsable(replica, 0, "a replica that replays nothing")
	lag := metric(a.metrics(), fmt.Sprintf("hearth_replica_lag_bytes{replica=%q}", name))
	require.Positive(t, lag, "the lag in bytes shows")
	r := a.awaitOrder(a.opA, id, 1) // found only on the primary
	require.Equal(t, float64(4200), r.Body["amount_cents"])

	onServer(t, replica, `SELECT pg_wal_replay_resume()`)
	a.awaitUsable(replica, 1, "a replica that caught up")
	onReplica := a.readsOn(name)
	a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+id, a.opA, nil)
	require.Greater(t, a.readsOn(name), onReplica, "the replica answers again")
}

// A replica setting that names a server of another cluster stops start-up
// with a message naming the setting and the server.
func TestReplicaOfAnotherClusterIsRefused(t *testing.T) {
	t.Parallel()
	other := pgtest.StartCluster(t)
	urls := pgtest.NewDB(t)
	var stderr syncBuffer
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a serve that started ends, without an error
	defer cancel()
	err := run(ctx, []string{"serve", "--http-addr", "127.0.0.1:0"}, env(map[string]string{
		"DATABASE_URL": urls.EventStore, "MASTER_KEY": testMasterKey,
		"READ_REPLICA_URLS": other.URL("postgres"),
	}), io.Discard, &stderr)
	require.Error(t, err)
	for _, want := range []string{"READ_REPLICA_URLS", fmt.Sprintf("127.0.0.1:%d/postgres", other.Port()), "another cluster", "system identifier"} {
		require.Contains(t, err.Error(), want)
	}
}

// A replica setting that names a primary (here the primary itself) is one
// more read path: no error, usable with no lag, and read-your-writes holds.
func TestReplicaThatIsAPrimaryServesReads(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	a := setupConfigured(t, urls, func(cfg *Config) {
		cfg.ReadReplicas = ReadReplicas{URLs: []string{urls.EventStore}, ReadModelURLs: []string{urls.ReadModel},
			MaxLag: 5 * time.Second, CheckEvery: 20 * time.Millisecond}
	}, nil)
	name := a.replicaName(pgtest.Cluster())
	require.Eventually(t, func() bool {
		m := a.metrics()
		return metric(m, fmt.Sprintf("hearth_replica_is_primary{replica=%q}", name)) == 1 &&
			metric(m, fmt.Sprintf("hearth_replica_usable{replica=%q}", name)) == 1
	}, 30*time.Second, 10*time.Millisecond, "the primary named as a replica is usable")
	customerID := a.createCustomer(a.opA, "Ada Lovelace")
	created := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{"customer_id": customerID, "amount_cents": 7})
	header := auth(a.opA)
	header.Set("Consistency-Position", positionOf(created.Body))
	onIt := a.readsOn(name)
	r, err := a.send(http.MethodGet, "/v1/orders/"+created.Body["id"].(string), header, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, r.Status, "%s", r)
	require.Equal(t, "reached", r.Header.Get("Consistency-Status"))
	require.Greater(t, a.readsOn(name), onIt, "it answered the read")
}
