package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"hearth/internal/pgcluster"
	"hearth/internal/pgtest"
)

// replicaOf is how metrics name a replica of the database dbURL names.
func replicaOf(replica *pgcluster.Cluster, dbURL string) string {
	db := dbURL[strings.LastIndex(dbURL, "/")+1:]
	db, _, _ = strings.Cut(db, "?")
	return fmt.Sprintf("127.0.0.1:%d/%s", replica.Port(), db)
}

// With the read models in a database of their own and replicas of the
// event store only (READ_REPLICA_URLS, no READMODEL_REPLICA_URLS), a GET
// that names a position waits on the read models' primary, and reads its
// reference data (the customer, an order's customer_name) from the primary
// too: the event store's replica may not show the client's earlier writes.
// The replica's replay is paused (within READ_REPLICA_MAX_LAG, just
// behind), so the outcome is deterministic.
func TestReadYourWritesReadsTheReferenceDataWhereItWaited(t *testing.T) {
	replica := pgtest.StartReplica(t)
	urls := pgtest.NewSplitDBs(t)
	a := setupConfigured(t, urls, func(cfg *Config) {
		cfg.ReadReplicas = ReadReplicas{
			URLs:   []string{pgtest.On(replica, urls.EventStore)}, // READMODEL_REPLICA_URLS unset
			MaxLag: 10 * time.Minute, CheckEvery: 20 * time.Millisecond,
		}
	}, nil)
	series := fmt.Sprintf("hearth_replica_usable{replica=%q}", replicaOf(replica, urls.EventStore))
	require.Eventually(t, func() bool { return metric(a.metrics(), series) == 1 }, 30*time.Second, 10*time.Millisecond,
		"the event store's replica is in use")

	onServer(t, replica, `SELECT pg_wal_replay_pause()`)
	customerID := a.createCustomer(a.opA, "Ada Lovelace")
	created := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA,
		map[string]any{"customer_id": customerID, "amount_cents": 100})
	position := positionOf(created.Body)
	require.Equal(t, float64(1), metric(a.metrics(), series), "the replica is still usable (within READ_REPLICA_MAX_LAG)")

	header := auth(a.opA)
	header.Set("Consistency-Position", position)
	r, err := a.send(http.MethodGet, "/v1/orders/"+created.Body["id"].(string), header, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, r.Status, "%s", r)
	require.Equal(t, "reached", r.Header.Get("Consistency-Status"))
	assert.Equal(t, "Ada Lovelace", r.Body["customer_name"],
		"a GET that reached its position shows the customer the client created before the write: %s", r)

	r, err = a.send(http.MethodGet, "/v1/customers/"+customerID, header, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, r.Status,
		"a GET naming the position of a write made after the customer was created finds it (Consistency-Status %q): %s",
		r.Header.Get("Consistency-Status"), r)
}

// A GET that names a position but is over CONSISTENCY_MAX_WAITS
// ("Consistency-Status: skipped") reads the primary, where the projections
// write first: its answer trails the write by the projection's
// milliseconds, not by a replica's lag (here a replica that has not
// replayed the order the client just created). (A cap below 1 stands for
// a cap that is full.)
func TestASkippedWaitReadsThePrimary(t *testing.T) {
	replica := pgtest.StartReplica(t)
	a := onReplica(t, pgtest.NewDB(t), replica, func(cfg *Config) {
		cfg.ReadReplicas.MaxLag = 10 * time.Minute
		cfg.ConsistencyMaxWaits = -1 // every wait over the cap
	})
	a.awaitUsable(replica, 1, "a streaming replica")
	customerID := a.createCustomer(a.opA, "Ada Lovelace")
	onServer(t, replica, `SELECT pg_wal_replay_pause()`)
	created := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA,
		map[string]any{"customer_id": customerID, "amount_cents": 100})
	id := created.Body["id"].(string)
	require.Eventually(t, func() bool { // the primary's read model has it (the projection ran)
		var n int
		err := a.dbs.rm.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM orders WHERE id::text = $1`, id).Scan(&n)
		return err == nil && n == 1
	}, 10*time.Second, 10*time.Millisecond)
	header := auth(a.opA)
	header.Set("Consistency-Position", positionOf(created.Body))
	r, err := a.send(http.MethodGet, "/v1/orders/"+id, header, nil)
	require.NoError(t, err)
	require.Equal(t, "skipped", r.Header.Get("Consistency-Status"))
	require.Equal(t, http.StatusOK, r.Status,
		"the primary's read model has the order; a skipped GET naming its position must not read a replica that has not replayed it: %s", r)
}

// The position of an event of the feed (or of a webhook) is one min_position
// takes (docs/api.md): here customer.erased, of a customer with no order,
// service request or schedule, whose erasure wrote no event with a
// read-model row to check. A GET naming it through a replica is answered
// only once the replica shows the erasure: never the customer's personal
// data with "Consistency-Status: reached". The replica's replay is paused
// before the erasure (within READ_REPLICA_MAX_LAG, just behind), so the
// outcome is deterministic.
func TestReadYourWritesThroughAReplicaShowsAnErasureWithoutAggregates(t *testing.T) {
	for layout, newDBs := range pgtest.Layouts() {
		t.Run(layout, func(t *testing.T) { readAnErasureWithoutAggregatesThroughAReplica(t, newDBs(t)) })
	}
}

func readAnErasureWithoutAggregatesThroughAReplica(t *testing.T, urls pgtest.URLs) {
	replica := pgtest.StartReplica(t)
	a := onReplica(t, urls, replica, func(cfg *Config) { cfg.ReadReplicas.MaxLag = 10 * time.Minute })
	a.awaitUsable(replica, 1, "a streaming replica")
	customerID := a.createCustomer(a.opA, "Ada Lovelace")
	require.Eventually(t, func() bool { // the replica has the customer
		r, err := a.send(http.MethodGet, "/v1/customers/"+customerID, auth(a.opA), nil)
		return err == nil && r.Status == http.StatusOK
	}, 10*time.Second, 5*time.Millisecond)

	onServer(t, replica, `SELECT pg_wal_replay_pause()`)
	erased := a.must(http.StatusOK, http.MethodPost, "/v1/customers/"+customerID+"/erase", a.opA, map[string]any{"confirm": customerID})
	require.Zero(t, intOf(erased.Body["aggregates"]), "an erasure that marked no aggregate: %s", erased)
	var position int64
	for _, e := range a.awaitFeed(a.opA, "limit=10", 1).Events {
		if e.Type == "customer.erased" && e.AggregateID == customerID {
			position = e.Position
		}
	}
	require.Positive(t, position, "the feed has customer.erased")

	header := auth(a.opA)
	header.Set("Consistency-Position", fmt.Sprint(position))
	header.Set("Consistency-Timeout", "500ms")
	r, err := a.send(http.MethodGet, "/v1/customers/"+customerID, header, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, r.Status, "%s", r)
	assert.NotEqual(t, "Ada Lovelace", r.Body["name"],
		"a GET naming the erasure's position shows the customer erased (Consistency-Status %q): %s", r.Header.Get("Consistency-Status"), r)
	assert.NotNil(t, r.Body["erased_at"], "%s", r)
}
