package webhooks

import (
	"context"
	"database/sql"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/uuid"
	"hearth/domain/webhook"
	"hearth/internal/database"
	"hearth/internal/pgtest"
)

// A worker's claim costs about the same however long the endpoint's queue
// and its log are: on a queue of 5,000 pending deliveries and a log of
// 100,000 finished ones, with the generic plan a prepared statement gets,
// it reads the pending rows in order through their index and checks each
// with one probe by aggregate, reads each claimed delivery's event by key,
// and reads no table whole.
func TestClaimPlan(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	conn, endpoint := endpointWithLog(t, db.DB, 100000,
		`INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version)
			SELECT $1, $2, gen_random_uuid(), 'order.created', gen_random_uuid(), v FROM generate_series(1, 1000) a, generate_series(1, 5) v`,
		`ANALYZE webhook_deliveries`, `SET plan_cache_mode = force_generic_plan`, `PREPARE claim(uuid, int, bigint, boolean) AS `+claimSQL)
	text := strings.Join(column(t, conn, "EXPLAIN EXECUTE claim('"+endpoint+"', 32, 15000, true)"), "\n")
	require.NotContains(t, text, "Seq Scan on webhook_deliveries", text)
	require.Contains(t, text, "Index Scan using webhook_deliveries_pending", text)
	require.Regexp(t, `Index Cond: \(\(endpoint_id = \$1\) AND \(aggregate_id = d\.aggregate_id\)\)`, text, "one probe per row, by aggregate")
	require.NotContains(t, text, "Seq Scan on events", text)
	require.Contains(t, text, "Index Scan using events_event_id_key on events", text, "each claimed delivery's event read by key")
}

// A round reads no table whole, whatever plan its connection cached: a
// generic plan made while the table was young (a new installation's first
// deliveries) is kept until the table is analysed again, and it scanned the
// whole table, for the first pending delivery of each aggregate and for the
// rows to claim, once the table had grown. Here the connection caches
// generic plans only, and the round's statements are prepared while the
// endpoint has 10 deliveries; its next round, on 20,000, must not scan
// the table (the server's count of sequential scans).
func TestRoundIsPlannedForTheTableAsItIs(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t).EventStore
	db := pgtest.Open(t, url)
	ctx := context.Background()
	_, endpoint := endpointWithLog(t, db.DB, 10, `ANALYZE webhook_deliveries`)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	// One connection: the round's statements are prepared on it, and their
	// plans cached there.
	one, err := database.OpenSQL(ctx, url+sep+"options=-c%20plan_cache_mode%3Dforce_generic_plan", 1, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = one.Close() })
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	sender, err := NewSender(SenderConfig{Timeout: time.Second, AllowPrivate: true})
	require.NoError(t, err)
	d, err := NewDispatcher(runCtx, DispatcherConfig{DB: one, Sender: sender, Secrets: testKeys, Keep: time.Hour,
		Schedule: webhook.Schedule{Initial: time.Hour, Max: time.Hour, For: 24 * time.Hour},
		OnStale:  func(err error) { t.Errorf("stale term: %v", err) }})
	require.NoError(t, err)

	_, _, _, err = d.round(ctx, endpoint, nil, true)
	require.NoError(t, err)
	_, err = db.DB.ExecContext(ctx, `INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version, status, completed_at)
		SELECT endpoint_id, merchant_id, gen_random_uuid(), 'order.created', gen_random_uuid(), 1, 'succeeded', now()
		FROM webhook_deliveries, generate_series(1, 20000) LIMIT 20000`)
	require.NoError(t, err)
	_, err = db.DB.ExecContext(ctx, `INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version)
		SELECT endpoint_id, merchant_id, gen_random_uuid(), 'order.created', gen_random_uuid(), 1 FROM webhook_deliveries LIMIT 32`)
	require.NoError(t, err)
	// The count of sequential scans, once the round's connection has
	// reported its own (a backend reports when it goes idle, at most once a
	// second unless forced).
	scans := func() (n int64) {
		_, err := one.ExecContext(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		require.NoError(t, db.DB.QueryRowContext(ctx, `SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'webhook_deliveries'`).Scan(&n))
		return n
	}
	before := scans()
	claims, _, _, err := d.round(ctx, endpoint, nil, true)
	require.NoError(t, err)
	require.Len(t, claims, claimBatch, "the new deliveries claimed")
	require.Equal(t, before, scans(), "sequential scans of webhook_deliveries in the round")
}

// Recording a round's results (and putting claims back) reads its rows by
// key, however stale the statistics are about pending rows: analysed when
// none was pending, a backlog of 5,000 since reads as a few rows, and a
// plan through the partial indexes of pending rows would test every one of
// them against the ids, in every round of the drain.
func TestRecordingReadsTheRowsByKey(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	conn, _ := endpointWithLog(t, db.DB, 20000, `ANALYZE webhook_deliveries`,
		`INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version, attempts)
			SELECT $1, $2, gen_random_uuid(), 'order.created', gen_random_uuid(), 1, 1 FROM generate_series(1, 5000)`,
		`SET plan_cache_mode = force_generic_plan`,
		`PREPARE record(text[], text[], bigint[], int[], float8[], text[]) AS `+recordSQL, `PREPARE release(text[]) AS `+releaseSQL)
	var ids string
	require.NoError(t, conn.QueryRowContext(ctx, `SELECT array_agg(id::text)::text FROM
		(SELECT id FROM webhook_deliveries WHERE status = 'pending' ORDER BY seq DESC LIMIT 32) x`).Scan(&ids))
	for _, execute := range []string{
		`EXECUTE record('` + ids + `', array_fill('succeeded'::text, ARRAY[32]), array_fill(0::bigint, ARRAY[32]),
			array_fill(204, ARRAY[32]), array_fill(1.5::float8, ARRAY[32]), array_fill(''::text, ARRAY[32]))`,
		`EXECUTE release('` + ids + `')`,
	} {
		_, err := conn.ExecContext(ctx, "BEGIN")
		require.NoError(t, err)
		text := strings.Join(column(t, conn, "EXPLAIN (ANALYZE, TIMING OFF) "+execute), "\n")
		_, err = conn.ExecContext(ctx, "ROLLBACK")
		require.NoError(t, err)
		require.Contains(t, text, "webhook_deliveries_pkey", text)
		require.NotContains(t, text, "webhook_deliveries_pending", text)
		require.NotContains(t, text, "webhook_deliveries_queue", text)
		require.NotContains(t, text, "Seq Scan on webhook_deliveries", text)
	}
}

// The dispatcher's looks for endpoints (the rescan, and the look after a
// notification) cost one index probe per endpoint, however many rows are
// pending: on a failing endpoint's queue of 5,000 deliveries never tried
// and a log of 100,000 finished ones, they read a few index entries, and
// the look after a notification finds only the endpoint an operator queued
// something for.
func TestWalkPlan(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	conn, err := db.DB.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	merchant, backlog, pinged, idle := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	exec := func(sql string, args ...any) {
		_, err := conn.ExecContext(ctx, sql, args...)
		require.NoError(t, err, sql)
	}
	exec(`INSERT INTO merchants (id, name) VALUES ($1, $2)`, merchant, "m-"+merchant)
	for _, e := range []string{backlog, pinged, idle} {
		exec(`INSERT INTO webhook_endpoints (id, merchant_id, url, secret, created_at, updated_at) VALUES ($1, $2, 'https://example.com/', $3, now(), now())`,
			e, merchant, webhook.NewSecret())
	}
	exec(`INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version, status, completed_at)
		SELECT $1, $2, gen_random_uuid(), 'order.created', gen_random_uuid(), 1, 'succeeded', now() FROM generate_series(1, 100000)`, idle, merchant)
	exec(`INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version)
		SELECT $1, $2, gen_random_uuid(), 'order.created', gen_random_uuid(), 1 FROM generate_series(1, 5000)`, backlog, merchant)
	exec(`INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version)
		SELECT $1, $2, gen_random_uuid(), 'order.created', gen_random_uuid(), 1 FROM generate_series(1, 100)`, pinged, merchant)
	exec(`INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version, ping_payload)
		VALUES ($1, $2, gen_random_uuid(), 'webhook_endpoint.ping', gen_random_uuid(), 1, '{}')`, pinged, merchant)
	// A ping in flight on the backlog's endpoint: queued, but tried.
	exec(`INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version, ping_payload, attempts)
		VALUES ($1, $2, gen_random_uuid(), 'webhook_endpoint.ping', gen_random_uuid(), 1, '{}', 1)`, backlog, merchant)
	exec(`ANALYZE webhook_deliveries`)
	exec(`SET plan_cache_mode = force_generic_plan`)
	for name, c := range map[string]struct {
		sql, index string
		want       []string
	}{
		"pending": {pendingSQL, "webhook_deliveries_pending", []string{backlog, pinged}},
		"queued":  {queuedSQL, "webhook_deliveries_queued", []string{pinged}},
	} {
		exec(`PREPARE ` + name + `(uuid, int) AS ` + c.sql)
		got := column(t, conn, `EXECUTE `+name+`('00000000-0000-0000-0000-000000000000', 1000)`)
		require.ElementsMatch(t, c.want, got, name)

		var plan string
		require.NoError(t, conn.QueryRowContext(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE `+name+`('00000000-0000-0000-0000-000000000000', 1000)`).Scan(&plan))
		var doc []struct {
			Plan planNode `json:"Plan"`
		}
		require.NoError(t, json.Unmarshal([]byte(plan), &doc))
		read := doc[0].Plan.rowsOf("webhook_deliveries")
		require.LessOrEqual(t, read, 3*len(c.want)+3, "%s: %d rows read of webhook_deliveries: %s", name, read, plan)
		require.Contains(t, plan, `"Index Name": "`+c.index+`"`, name)
	}
}

// planNode is a node of EXPLAIN (ANALYZE, FORMAT JSON).
type planNode struct {
	Relation string     `json:"Relation Name"`
	Rows     float64    `json:"Actual Rows"`
	Loops    float64    `json:"Actual Loops"`
	Removed  float64    `json:"Rows Removed by Filter"`
	Plans    []planNode `json:"Plans"`
}

// rowsOf is how many rows the nodes scanning table produced or filtered
// out, over all their loops.
func (n planNode) rowsOf(table string) int {
	total := 0
	if n.Relation == table {
		total += int((n.Rows + n.Removed) * n.Loops)
	}
	for _, c := range n.Plans {
		total += c.rowsOf(table)
	}
	return total
}

// column is the one column of what query returns on conn.
// endpointWithLog makes a merchant and an endpoint with a log of finished
// deliveries, then runs then on a connection of db's, which it returns with
// the endpoint: an INSERT of then gets the endpoint and the merchant as $1
// and $2.
func endpointWithLog(t *testing.T, db *sql.DB, finished int, then ...string) (*sql.Conn, string) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	merchant, endpoint := uuid.New(), uuid.New()
	_, err = conn.ExecContext(ctx, `INSERT INTO merchants (id, name) VALUES ($1, $2)`, merchant, "m-"+merchant)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, `INSERT INTO webhook_endpoints (id, merchant_id, url, secret, created_at, updated_at)
		VALUES ($1, $2, 'https://example.com/', $3, now(), now())`, endpoint, merchant, webhook.NewSecret())
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, `INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version, status, completed_at)
		SELECT $1, $2, gen_random_uuid(), 'order.created', gen_random_uuid(), 1, 'succeeded', now() FROM generate_series(1, $3)`, endpoint, merchant, finished)
	require.NoError(t, err)
	for _, q := range then {
		var args []any
		if strings.HasPrefix(q, "INSERT") {
			args = []any{endpoint, merchant}
		}
		_, err := conn.ExecContext(ctx, q, args...)
		require.NoError(t, err, q)
	}
	return conn, endpoint
}

func column(t *testing.T, conn *sql.Conn, query string) []string {
	t.Helper()
	rows, err := conn.QueryContext(context.Background(), query)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var v string
		require.NoError(t, rows.Scan(&v))
		out = append(out, v)
	}
	require.NoError(t, rows.Err())
	return out
}

// The fan-out's check that an endpoint was enabled when an event occurred
// costs one index probe per endpoint, however often the endpoint was
// disabled and enabled again: every change of enabled leaves a period
// (webhook_endpoint_periods), kept as long as the endpoint, and the
// fan-out is shared by every merchant (one projection per topic), so a
// merchant that toggled its endpoints 20,000 times must not make each of
// its events read 20,000 rows per endpoint while the others' deliveries
// wait behind it. Events in an enabled period, old or new, still get
// their delivery, and an event between two periods none.
func TestFanOutPlan(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	conn, err := db.DB.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	merchant, endpoint := uuid.New(), uuid.New()
	exec := func(sql string, args ...any) {
		_, err := conn.ExecContext(ctx, sql, args...)
		require.NoError(t, err, sql)
	}
	exec(`INSERT INTO merchants (id, name) VALUES ($1, $2)`, merchant, "m-"+merchant)
	// Enabled since a while, with the trigger's open period; then 20,000
	// closed periods of an hour each (enabled for the first half) before it.
	exec(`INSERT INTO webhook_endpoints (id, merchant_id, url, secret, created_at, updated_at)
		VALUES ($1, $2, 'https://example.com/', $3, now() - interval '30000 hours', now() - interval '1 hour')`, endpoint, merchant, webhook.NewSecret())
	exec(`UPDATE webhook_endpoint_periods SET enabled_from = now() - interval '1 hour' WHERE endpoint_id = $1`, endpoint)
	exec(`INSERT INTO webhook_endpoint_periods (endpoint_id, enabled_from, enabled_until)
		SELECT $1, now() - (h + 1) * interval '1 hour', now() - (h + 1) * interval '1 hour' + interval '30 minutes'
		FROM generate_series(1, 20000) h`, endpoint)
	exec(`ANALYZE webhook_endpoint_periods`)
	exec(`SET plan_cache_mode = force_generic_plan`)
	exec(`PREPARE fanout(text[], text[], text[], text[], int[], timestamptz[], text) AS ` + fanOutSQL)
	execute := func(ago string) string {
		return `EXECUTE fanout(ARRAY['` + uuid.New() + `'], ARRAY['` + merchant + `'], ARRAY['order.created'], ARRAY['` + uuid.New() +
			`'], ARRAY[1], ARRAY[now() - interval '` + ago + `'], '')`
	}
	for ago, queued := range map[string]bool{
		"1 minute":              true,  // the open period
		"9999 hours 50 minutes": true,  // inside an old period
		"9999 hours 20 minutes": false, // between two
	} {
		exec("BEGIN")
		var plan string
		require.NoError(t, conn.QueryRowContext(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+execute(ago)).Scan(&plan))
		var n int
		require.NoError(t, conn.QueryRowContext(ctx, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, endpoint).Scan(&n))
		exec("ROLLBACK")
		require.Equal(t, queued, n == 1, "an event %s ago: %d deliveries", ago, n)
		var doc []struct {
			Plan planNode `json:"Plan"`
		}
		require.NoError(t, json.Unmarshal([]byte(plan), &doc))
		read := doc[0].Plan.rowsOf("webhook_endpoint_periods")
		require.LessOrEqual(t, read, 2, "an event %s ago: %d rows read of webhook_endpoint_periods: %s", ago, read, plan)
	}
}

// The check of an endpoint's cap of test pings and redeliveries
// (webhook.MaxQueued) reads the queued ones only, through
// webhook_deliveries_queued, and stops at the cap: on an endpoint
// with a backlog of 50,000 deliveries of the fan-out and more queued ones
// than the cap, with the generic plan a prepared statement gets, it reads
// at most MaxQueued + 1 rows, so a refused ping costs little however long
// the backlog is.
func TestQueuedCountPlan(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	conn, endpoint := endpointWithLog(t, db.DB, 1000,
		`INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version)
			SELECT $1, $2, gen_random_uuid(), 'order.created', gen_random_uuid(), 1 FROM generate_series(1, 50000)`,
		`INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version, ping_payload)
			SELECT $1, $2, gen_random_uuid(), 'webhook_endpoint.ping', gen_random_uuid(), 1, '{}' FROM generate_series(1, 2000)`,
		`ANALYZE webhook_deliveries`, `SET plan_cache_mode = force_generic_plan`, `PREPARE queued(uuid, int) AS `+queuedCountSQL)
	var n int
	require.NoError(t, conn.QueryRowContext(context.Background(), `EXECUTE queued('`+endpoint+`', `+strconv.Itoa(webhook.MaxQueued)+`)`).Scan(&n))
	require.Equal(t, webhook.MaxQueued, n)
	plan, raw := pgtest.ExplainAnalyzed(t, conn, `EXECUTE queued('`+endpoint+`', `+strconv.Itoa(webhook.MaxQueued)+`)`)
	read := 0.0
	plan.Walk(func(n pgtest.PlanNode) {
		if n.RelationName == "webhook_deliveries" {
			read += n.Rows() + n.RemovedByFilter*max(n.ActualLoops, 1)
			require.Equal(t, "webhook_deliveries_queued", n.IndexName, raw)
		}
	})
	require.LessOrEqual(t, read, float64(webhook.MaxQueued+1), raw)
}
