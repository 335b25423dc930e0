package pubsub_test

import (
	"context"
	"strings"
	"testing"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/projector"
	"hearth/internal/pgtest"
)

// backlog fills the orders topic with 100,000 messages in 100
// transactions and places the consumer group "orders" after the first
// `after` of them, in delivery order.
func backlog(t *testing.T, after int) *bun.DB {
	t.Helper()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	for range 100 {
		_, err := db.DB.ExecContext(ctx, `INSERT INTO watermill_orders (uuid, payload, metadata, transaction_id)
			SELECT gen_random_uuid()::text, '{}', '{}', pg_current_xact_id() FROM generate_series(1, 1000)`)
		require.NoError(t, err)
	}
	_, err := db.DB.ExecContext(ctx, `VACUUM ANALYZE watermill_orders`)
	require.NoError(t, err)
	// Both queries read only below pg_snapshot_xmin, which an open
	// transaction of any parallel test in the cluster holds back: a
	// transaction that began during the inserts above would hide the rest
	// of the backlog from them. It is all visible once its last
	// transaction is below the xmin, and stays so.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var visible bool
		err := db.DB.QueryRowContext(ctx, `SELECT max(transaction_id) < pg_snapshot_xmin(pg_current_snapshot()) FROM watermill_orders`).Scan(&visible)
		require.NoError(c, err)
		assert.True(c, visible, "a transaction of another test holds pg_snapshot_xmin below the backlog")
	}, time.Minute, 10*time.Millisecond)
	_, err = db.DB.ExecContext(ctx, `INSERT INTO watermill_offsets_orders (consumer_group, offset_acked, last_processed_transaction_id)
		SELECT 'orders', "offset", transaction_id FROM watermill_orders ORDER BY transaction_id, "offset" OFFSET $1 - 1 LIMIT 1`, after)
	require.NoError(t, err)
	return db
}

// scanned is the most rows any scan of the topic read in q's plan: those
// it returned and those its filter dropped.
func scanned(t *testing.T, db *bun.DB, q string, args ...any) float64 {
	t.Helper()
	plan, _ := pgtest.ExplainAnalyzed(t, db.DB, q, args...)
	most := 0.0
	plan.Walk(func(n pgtest.PlanNode) {
		if strings.Contains(n.NodeType, "Scan") && n.RelationName == "watermill_orders" {
			most = max(most, n.Rows()+n.RemovedByFilter*max(n.ActualLoops, 1))
		}
	})
	return most
}

// The subscribers' query selects the batch after the group's position,
// the same messages in the same order as watermill-sql's own query, and
// reads one batch from the topic however long the backlog behind it
// (watermill-sql's query reads the whole backlog for every batch).
func TestKeysetSchemaReadsOneBatch(t *testing.T) {
	t.Parallel()
	db := backlog(t, 50_500)
	batch := wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: 1000}
	ours := pubsub.KeysetSchema{DefaultPostgreSQLSchema: batch}.SelectQuery(pubsub.TopicOrders, "orders", projector.LockFreeOffsets{})
	theirs := batch.SelectQuery(pubsub.TopicOrders, "orders", projector.LockFreeOffsets{})
	read := func(q wsql.Query) []string {
		rows, err := db.DB.Query(q.Query, q.Args...)
		require.NoError(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			r, err := batch.UnmarshalMessage(rows)
			require.NoError(t, err)
			out = append(out, r.Msg.UUID)
		}
		require.NoError(t, rows.Err())
		return out
	}
	want := read(theirs)
	require.Len(t, want, 1000)
	require.Equal(t, want, read(ours))
	require.LessOrEqual(t, scanned(t, db, ours.Query, ours.Args...), 1000.0)
	require.Greater(t, scanned(t, db, theirs.Query, theirs.Args...), 40_000.0, "watermill-sql's query reads the backlog")

	// With watermill-sql's own offsets adapter (FOR UPDATE on the group's
	// row) too, inside the subscriber's transaction.
	tx, err := db.DB.Begin()
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	locking := pubsub.KeysetSchema{DefaultPostgreSQLSchema: batch}.SelectQuery(pubsub.TopicOrders, "orders", pubsub.Offsets)
	rows, err := tx.Query(locking.Query, locking.Args...)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 1000, n)
}

// With Hidden, the subscribers' query also says whether the topic holds
// messages committed but hidden from it by an older open transaction, and
// it asks the primary key's end for that, not the table, even before the
// table has statistics.
func TestKeysetSchemaReportsHiddenMessages(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	insert := func(n int) {
		_, err := db.DB.ExecContext(ctx, `INSERT INTO watermill_orders (uuid, payload, metadata, transaction_id)
			SELECT gen_random_uuid()::text, '{}', '{}', pg_current_xact_id() FROM generate_series(1, $1)`, n)
		require.NoError(t, err)
	}
	insert(20_000) // not analyzed
	_, err := db.DB.ExecContext(ctx, `INSERT INTO watermill_offsets_orders (consumer_group, offset_acked, last_processed_transaction_id)
		SELECT 'orders', "offset", transaction_id FROM watermill_orders ORDER BY transaction_id, "offset" OFFSET 19994 LIMIT 1`)
	require.NoError(t, err)
	schema := pubsub.KeysetSchema{DefaultPostgreSQLSchema: pubsub.Schema, Hidden: true}
	q := schema.SelectQuery(pubsub.TopicOrders, "orders", projector.LockFreeOffsets{})
	require.LessOrEqual(t, scanned(t, db, q.Query, q.Args...), float64(schema.BatchSize()+1))

	// read returns how many messages q reads and whether it says some are
	// hidden.
	read := func() (n int, hidden bool) {
		rows, err := db.DB.QueryContext(ctx, q.Query, q.Args...)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			r, err := schema.UnmarshalMessage(rows)
			require.NoError(t, err)
			n++
			hidden = r.ExtraData[pubsub.HiddenKey].(bool)
		}
		require.NoError(t, rows.Err())
		return n, hidden
	}
	// Another test's open transaction may hide messages for a moment.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, hidden := read()
		assert.Equal(c, 5, n)
		assert.False(c, hidden)
	}, time.Minute, 10*time.Millisecond)

	older, err := db.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = older.Rollback() }()
	_, err = older.ExecContext(ctx, `SELECT pg_current_xact_id()`)
	require.NoError(t, err)
	insert(1)
	n, hidden := read()
	require.Equal(t, 5, n, "the new message is hidden behind the open transaction")
	require.True(t, hidden, "and the read says so")
}
