package webhooks

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/domain/uuid"
	"hearth/domain/webhook"
	"hearth/internal/pgtest"
)

// A worker's claim costs about the same however long the endpoint's queue
// and its log are: on a queue of 5,000 pending deliveries and a log of
// 100,000 finished ones, with the generic plan a prepared statement gets,
// it reads the pending rows in order through their index and checks each
// with one probe by aggregate, and reads no table whole.
func TestClaimPlan(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	conn, err := db.DB.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	merchant, endpoint := uuid.New(), uuid.New()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO merchants (id, name) VALUES ($1, $2)`, []any{merchant, "m-" + merchant}},
		{`INSERT INTO webhook_endpoints (id, merchant_id, url, secret, created_at, updated_at) VALUES ($1, $2, 'https://example.com/', $3, now(), now())`,
			[]any{endpoint, merchant, webhook.NewSecret()}},
		{`INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version, status, completed_at)
			SELECT $1, $2, gen_random_uuid(), 'order.created', gen_random_uuid(), 1, 'succeeded', now() FROM generate_series(1, 100000)`, []any{endpoint, merchant}},
		{`INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version)
			SELECT $1, $2, gen_random_uuid(), 'order.created', gen_random_uuid(), v FROM generate_series(1, 1000) a, generate_series(1, 5) v`, []any{endpoint, merchant}},
		{`ANALYZE webhook_deliveries`, nil},
		{`SET plan_cache_mode = force_generic_plan`, nil},
		{`PREPARE claim(uuid, int, bigint, boolean) AS ` + claimSQL, nil},
	} {
		_, err := conn.ExecContext(ctx, q.sql, q.args...)
		require.NoError(t, err, q.sql)
	}
	rows, err := conn.QueryContext(ctx, "EXPLAIN EXECUTE claim('"+endpoint+"', 32, 15000, true)")
	require.NoError(t, err)
	var plan []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, line)
	}
	require.NoError(t, rows.Err())
	text := strings.Join(plan, "\n")
	require.NotContains(t, text, "Seq Scan on webhook_deliveries", text)
	require.Contains(t, text, "Index Scan using webhook_deliveries_pending", text)
	require.Regexp(t, `Index Cond: \(\(endpoint_id = \$1\) AND \(aggregate_id = d\.aggregate_id\)\)`, text, "one probe per row, by aggregate")
}
