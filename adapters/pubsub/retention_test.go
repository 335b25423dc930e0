package pubsub_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/internal/pgtest"
)

// topicRow is a message's place in delivery order.
type topicRow struct {
	tx     string
	offset int64
}

// ordersTopic lists the orders topic in delivery order.
func (f fixture) ordersTopic(t *testing.T) []topicRow {
	t.Helper()
	// m.: a bare transaction_id would order by the text output column.
	rows, err := f.ES.DB.Query(`SELECT m.transaction_id::text, m."offset" FROM watermill_orders m ORDER BY m.transaction_id, m."offset"`)
	require.NoError(t, err)
	defer rows.Close()
	var out []topicRow
	for rows.Next() {
		var r topicRow
		require.NoError(t, rows.Scan(&r.tx, &r.offset))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// messages creates n orders, one transaction and one message each, on a
// fresh database, and returns the messages in delivery order.
func messages(t *testing.T, n int) (fixture, []topicRow) {
	t.Helper()
	f := setup(t, pgtest.NewDB(t))
	for range n {
		f.CreateOrder(t)
	}
	rows := f.ordersTopic(t)
	require.Len(t, rows, n)
	return f, rows
}

// ack stores group's offset at r, as watermill-sql's ack does.
func (f fixture) ack(t *testing.T, group string, r topicRow) {
	t.Helper()
	_, err := f.ES.DB.Exec(`INSERT INTO watermill_offsets_orders (consumer_group, offset_acked, last_processed_transaction_id)
		VALUES ($1, $2, $3::text::xid8) ON CONFLICT (consumer_group) DO UPDATE
		SET offset_acked = excluded.offset_acked, last_processed_transaction_id = excluded.last_processed_transaction_id`,
		group, r.offset, r.tx)
	require.NoError(t, err)
}

// age makes the messages rs eight days old.
func (f fixture) age(t *testing.T, rs ...topicRow) {
	t.Helper()
	for _, r := range rs {
		_, err := f.ES.DB.Exec(`UPDATE watermill_orders SET created_at = created_at - interval '8 days'
			WHERE transaction_id = $1::text::xid8 AND "offset" = $2`, r.tx, r.offset)
		require.NoError(t, err)
	}
}

func newRetention(t *testing.T, db *sql.DB, batch int, reg prometheus.Registerer) *pubsub.Retention {
	t.Helper()
	r, err := pubsub.NewRetention(pubsub.RetentionConfig{
		DB: db, Keep: 7 * 24 * time.Hour, Batch: batch, Registry: reg,
		Topics: []pubsub.RetainedTopic{ordersTopic},
	})
	require.NoError(t, err)
	return r
}

// prunes prunes the orders topic with r and requires that it deleted n
// messages and left those of left.
func (f fixture) prunes(t *testing.T, r *pubsub.Retention, n int, left []topicRow, msgAndArgs ...any) {
	t.Helper()
	deleted, err := r.PruneAll(context.Background())
	require.NoError(t, err)
	require.Equal(t, n, deleted, msgAndArgs...)
	require.Equal(t, left, f.ordersTopic(t), msgAndArgs...)
}

var ordersTopic = pubsub.RetainedTopic{Topic: pubsub.TopicOrders, Groups: []string{"orders"}}

// Retention deletes a message only once every consumer group of its topic
// has acknowledged it and it is older than Keep; unacknowledged and young
// messages stay, whichever group is behind.
func TestRetentionDeletesOnlyAcknowledgedOldMessages(t *testing.T) {
	t.Parallel()
	f, rows := messages(t, 6)
	f.age(t, rows[:4]...) // rows 4 and 5 are young
	f.ack(t, "orders", rows[4])
	f.ack(t, "audit", rows[2]) // a second group, further behind
	reg := prometheus.NewRegistry()
	r := newRetention(t, f.ES.DB, 1000, reg)

	f.prunes(t, r, 3, rows[3:], "old, but the audit group has not acknowledged row 3")

	f.ack(t, "audit", rows[5])
	f.prunes(t, r, 1, rows[4:], "acknowledged by both, but young")

	f.age(t, rows[4:]...)
	f.prunes(t, r, 1, rows[5:], "old, but the orders group has not acknowledged row 5")

	f.ack(t, "orders", rows[5])
	f.prunes(t, r, 1, nil)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP hearth_topic_pruned_messages_total Messages deleted from a topic table by retention (acknowledged by every consumer group and older than TOPIC_RETENTION).
# TYPE hearth_topic_pruned_messages_total counter
hearth_topic_pruned_messages_total{topic="orders"} 6
`)))
}

// Nothing goes while a required group has no offset (a projection that
// never ran has acknowledged nothing), nor when no group has one.
func TestRetentionWaitsForEveryRequiredGroup(t *testing.T) {
	t.Parallel()
	f, rows := messages(t, 3)
	f.age(t, rows...)
	r := newRetention(t, f.ES.DB, 1000, nil)

	f.prunes(t, r, 0, rows, "no group at all")

	f.ack(t, "audit", rows[2])
	f.prunes(t, r, 0, rows, "the orders group has no offset yet")

	// A group that has subscribed but consumed nothing (watermill-sql's zero
	// offset) holds everything too.
	f.ack(t, "orders", topicRow{tx: "0", offset: 0})
	f.prunes(t, r, 0, rows)

	f.ack(t, "orders", rows[1])
	f.prunes(t, r, 2, rows[2:])
}

// Delivery order is (transaction_id, offset), not the offset: a
// transaction that took its id first but inserted last has the larger
// offset and comes first. A group that has acknowledged it has not yet
// been handed the row with the smaller offset, which must stay.
func TestRetentionFollowsDeliveryOrderNotOffsets(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	ctx := context.Background()
	insert := `INSERT INTO watermill_orders (uuid, payload, metadata, transaction_id)
		VALUES (gen_random_uuid()::text, '{}', '{}', pg_current_xact_id())`
	early, err := f.ES.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = early.Rollback() }()
	_, err = early.Exec(`SELECT pg_current_xact_id()`) // takes the smaller transaction id
	require.NoError(t, err)
	_, err = f.ES.DB.Exec(insert) // a later transaction inserts and commits first: the smaller offset
	require.NoError(t, err)
	_, err = early.Exec(insert)
	require.NoError(t, err)
	require.NoError(t, early.Commit())

	rows := f.ordersTopic(t)
	require.Len(t, rows, 2)
	require.Greater(t, rows[0].offset, rows[1].offset, "the first in delivery order has the larger offset")
	f.age(t, rows...)
	f.ack(t, "orders", rows[0])

	f.prunes(t, newRetention(t, f.ES.DB, 1000, nil), 1, rows[1:], "the row with the smaller offset was not delivered yet")
}

// Retention deletes in statements of at most Batch rows, oldest first, and
// skips a row another transaction holds instead of waiting for it.
func TestRetentionDeletesInBatches(t *testing.T) {
	t.Parallel()
	f, rows := messages(t, 7)
	f.age(t, rows...)
	f.ack(t, "orders", rows[6])
	// Each DELETE statement logs how many rows it deleted.
	_, err := f.ES.DB.Exec(`
		CREATE TABLE prune_log (id serial, n int);
		CREATE FUNCTION log_prune() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO prune_log (n) SELECT count(*) FROM gone; RETURN NULL; END $$;
		CREATE TRIGGER log_prune AFTER DELETE ON watermill_orders
			REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION log_prune();`)
	require.NoError(t, err)
	ctx := context.Background()
	held, err := f.ES.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = held.Rollback() }()
	_, err = held.Exec(`SELECT 1 FROM watermill_orders WHERE "offset" = $1 FOR UPDATE`, rows[3].offset)
	require.NoError(t, err)

	n, err := newRetention(t, f.ES.DB, 2, nil).PruneAll(ctx)
	require.NoError(t, err)
	require.Equal(t, 6, n)
	var sizes []int
	logged, err := f.ES.DB.Query(`SELECT n FROM prune_log ORDER BY id`)
	require.NoError(t, err)
	defer logged.Close()
	for logged.Next() {
		var k int
		require.NoError(t, logged.Scan(&k))
		sizes = append(sizes, k)
	}
	require.Equal(t, []int{2, 2, 2, 0}, sizes, "batches of two; the last one comes back short")
	require.Equal(t, []topicRow{rows[3]}, f.ordersTopic(t), "the held row is skipped")
	require.NoError(t, held.Rollback())
}

// The topic tables' sizes are gauges read on each scrape.
func TestTopicStats(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	for range 3 {
		f.CreateOrder(t)
	}
	f.age(t, f.ordersTopic(t)[0])
	stats := pubsub.NewTopicStats(f.ES.DB, nil, pubsub.TopicOrders, pubsub.TopicPoison)
	problems, err := testutil.CollectAndLint(stats)
	require.NoError(t, err)
	require.Empty(t, problems)
	require.Eventually(t, func() bool { // the statistics collector reports commits within about a second
		return testutil.CollectAndCompare(stats, strings.NewReader(`
# HELP hearth_topic_messages Messages stored in a topic table (Postgres' live-tuple estimate).
# TYPE hearth_topic_messages gauge
hearth_topic_messages{topic="orders"} 3
hearth_topic_messages{topic="poison"} 0
`), "hearth_topic_messages") == nil
	}, 10*time.Second, 20*time.Millisecond)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(stats))
	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, fam := range families {
		for _, m := range fam.GetMetric() {
			got[fam.GetName()+"/"+m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	require.Greater(t, got["hearth_topic_bytes/orders"], 0.0)
	require.InDelta(t, 8*24*3600, got["hearth_topic_oldest_message_age_seconds/orders"], 60, "the first message in delivery order is the aged one")
	require.Zero(t, got["hearth_topic_oldest_message_age_seconds/poison"], "empty")
}

// position is r's place in delivery order.
func position(t *testing.T, r topicRow) pubsub.Position {
	t.Helper()
	tx, err := strconv.ParseUint(r.tx, 10, 64)
	require.NoError(t, err)
	return pubsub.Position{TransactionID: tx, Offset: r.offset}
}

// Retention marks the last message it deleted, in the statement that
// deletes; a consumer group whose position is before the mark has lost
// messages it never consumed, and CheckGap says which (topic, group and
// range), whichever way the group got there: a row written after the
// pruning, or deleted and written again behind.
func TestRetentionMarksWhatItPrunedAndConsumersFindTheGap(t *testing.T) {
	t.Parallel()
	f, rows := messages(t, 5)
	f.age(t, rows...)
	f.ack(t, "orders", rows[2])
	ctx := context.Background()
	gapOf := func(group string) error {
		return pubsub.CheckGap(ctx, f.ES.DB, pubsub.TopicOrders, group, pubsub.Offsets.NextOffsetQuery(pubsub.TopicOrders, group))
	}
	require.NoError(t, gapOf("late"), "nothing pruned yet")

	f.prunes(t, newRetention(t, f.ES.DB, 2, nil), 3, rows[3:])
	require.NoError(t, gapOf("orders"), "it consumed everything that went")

	err := gapOf("late") // no row: it starts at the beginning
	var gap *pubsub.TopicGapError
	require.ErrorAs(t, err, &gap)
	require.Equal(t, &pubsub.TopicGapError{Topic: "orders", Group: "late", Through: position(t, rows[2])}, gap)
	require.ErrorContains(t, err, fmt.Sprintf("topic orders, consumer group late: the messages after (transaction 0, offset 0) up to (transaction %s, offset %d) were pruned before the group consumed them",
		rows[2].tx, rows[2].offset))

	f.ack(t, "behind", rows[0])
	require.ErrorAs(t, gapOf("behind"), &gap)
	require.Equal(t, &pubsub.TopicGapError{Topic: "orders", Group: "behind", After: position(t, rows[0]), Through: position(t, rows[2])}, gap)
	f.ack(t, "behind", rows[2])
	require.NoError(t, gapOf("behind"))

	// The mark moves on with the next pruning.
	f.ack(t, "orders", rows[4])
	f.ack(t, "behind", rows[4])
	f.prunes(t, newRetention(t, f.ES.DB, 2, nil), 2, nil)
	require.ErrorAs(t, gapOf("late"), &gap)
	require.Equal(t, position(t, rows[4]), gap.Through)
}

// Retention names the consumer group that keeps messages older than Keep
// (one with no position yet, or one behind them), in its log and in
// hearth_topic_retention_held_by, until that group moves on or its row is
// deleted (a retired group released by the operator).
func TestRetentionSaysWhichGroupHoldsItBack(t *testing.T) {
	t.Parallel()
	f, rows := messages(t, 4)
	f.age(t, rows[:3]...) // row 3 is young
	reg := prometheus.NewRegistry()
	var logged strings.Builder
	r, err := pubsub.NewRetention(pubsub.RetentionConfig{
		DB: f.ES.DB, Keep: 7 * 24 * time.Hour, Batch: 10, Registry: reg,
		Log:    slog.New(slog.NewTextHandler(&logged, nil)),
		Topics: []pubsub.RetainedTopic{ordersTopic},
	})
	require.NoError(t, err)
	heldBy := func(group string) {
		t.Helper()
		want := ""
		if group != "" {
			want = `# HELP hearth_topic_retention_held_by 1 for the consumer group that keeps messages older than TOPIC_RETENTION in a topic table (no position yet, or not past them); absent when none does.
# TYPE hearth_topic_retention_held_by gauge
hearth_topic_retention_held_by{group="` + group + `",topic="orders"} 1
`
		}
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "hearth_topic_retention_held_by"))
	}

	f.prunes(t, r, 0, rows, "the orders group has no position")
	heldBy("orders")
	require.Contains(t, logged.String(), `msg="a consumer group holds the topic back`)
	require.Contains(t, logged.String(), `topic=orders group=orders position="none: it has consumed nothing yet" offsets_table=watermill_offsets_orders`)

	f.ack(t, "orders", rows[3])
	f.ack(t, "relay", rows[0]) // a relay turned off for good
	f.prunes(t, r, 1, rows[1:])
	heldBy("relay")
	require.Contains(t, logged.String(), `topic=orders group=relay position="(transaction `+rows[0].tx)

	_, err = f.ES.DB.Exec(`DELETE FROM watermill_offsets_orders WHERE consumer_group = 'relay'`) // released
	require.NoError(t, err)
	f.prunes(t, r, 2, rows[3:], "only the young message stays")
	heldBy("")
	require.Contains(t, logged.String(), `msg="the consumer group no longer holds the topic back" component=retention topic=orders group=relay`)
	require.Equal(t, 2, strings.Count(logged.String(), "level=WARN"), "a warning when the group changes, not on every pass")
}

// Transaction ids are ordered as numbers, not as text ("10" sorts before
// "9"): of young messages 9 and 10, the first young message in delivery
// order is 9, and it stays, with everything after it.
func TestRetentionOrdersTransactionIDsAsNumbers(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	for _, tx := range []string{"8", "9", "10"} {
		_, err := f.ES.DB.Exec(`INSERT INTO watermill_orders (uuid, payload, metadata, transaction_id)
			VALUES (gen_random_uuid()::text, '{}', '{}', $1::text::xid8)`, tx)
		require.NoError(t, err)
	}
	rows := f.ordersTopic(t)
	require.Equal(t, []string{"8", "9", "10"}, []string{rows[0].tx, rows[1].tx, rows[2].tx})
	f.age(t, rows[0]) // 9 and 10 are young
	f.ack(t, "orders", rows[2])
	f.prunes(t, newRetention(t, f.ES.DB, 1000, nil), 1, rows[1:], "only the old message 8 goes")
}
