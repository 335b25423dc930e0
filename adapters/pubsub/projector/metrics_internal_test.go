package projector

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/internal/pgtest"
)

// The lag gauge counts the messages after the group's position, and reads
// only those: a caught-up projection's scrape does not read the topic
// (which keeps TOPIC_RETENTION of messages).
func TestLagReadsOnlyWhatIsBehind(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	_, err := db.DB.ExecContext(ctx, `INSERT INTO watermill_orders (uuid, payload, metadata, transaction_id)
		SELECT gen_random_uuid()::text, '{}', '{}', pg_current_xact_id() FROM generate_series(1, 50000)`)
	require.NoError(t, err)
	_, err = db.DB.ExecContext(ctx, `VACUUM ANALYZE watermill_orders`)
	require.NoError(t, err)
	p := Projection{Name: "orders", Topic: pubsub.TopicOrders}
	at := func(n int) {
		_, err := db.DB.ExecContext(ctx, `INSERT INTO watermill_offsets_orders (consumer_group, offset_acked, last_processed_transaction_id)
			SELECT 'orders', "offset", transaction_id FROM watermill_orders ORDER BY transaction_id, "offset" OFFSET $1 - 1 LIMIT 1
			ON CONFLICT (consumer_group) DO UPDATE SET offset_acked = excluded.offset_acked,
				last_processed_transaction_id = excluded.last_processed_transaction_id`, n)
		require.NoError(t, err)
	}
	behind := func() int64 {
		n, _, err := lag(ctx, db.DB, p)
		require.NoError(t, err)
		return n
	}
	require.EqualValues(t, 50_000, behind(), "no position: nothing acknowledged")
	at(40_000)
	require.EqualValues(t, 10_000, behind())
	at(50_000)
	require.Zero(t, behind())

	var plan string
	rows, err := db.DB.QueryContext(ctx, "EXPLAIN (ANALYZE, TIMING OFF) "+lagQuery(p), p.Name)
	require.NoError(t, err)
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan += line + "\n"
	}
	require.NoError(t, rows.Close())
	require.NotContains(t, plan, "Seq Scan on watermill_orders", plan)
	require.True(t, strings.Contains(plan, "(actual rows=0 loops=1)"), "a caught-up group reads no message:\n%s", plan)
}
