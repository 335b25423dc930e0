package projector_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/projector"
	"hearth/internal/pgtest"
)

// After retention pruned every acknowledged message, catch-up (a new
// leadership term) resumes from the stored offset: it applies exactly the
// events written since, and every row still equals the fold of its events.
// Not parallel: catch-up reads only below pg_snapshot_xmin (see above).
func TestCatchUpAfterRetention(t *testing.T) {
	for name, newDB := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			urls := newDB(t)
			f := setup(t, urls)
			ctx := context.Background()
			c := projector.CatchUp{DB: f.ES.DB, SameDB: !urls.Split(), PageSize: 7, Log: quietLog()}
			before := f.createOrders(t, 5)
			n, err := c.Run(ctx, f.ordersProjection())
			require.NoError(t, err)
			require.Equal(t, 20, n)

			_, err = f.ES.DB.Exec(`UPDATE watermill_orders SET created_at = created_at - interval '8 days'`)
			require.NoError(t, err)
			r, err := pubsub.NewRetention(pubsub.RetentionConfig{DB: f.ES.DB, Keep: 7 * 24 * time.Hour, Batch: 3,
				Topics: []pubsub.RetainedTopic{{Topic: pubsub.TopicOrders, Groups: []string{"orders"}}}})
			require.NoError(t, err)
			pruned, err := r.Prune(ctx, pubsub.RetainedTopic{Topic: pubsub.TopicOrders, Groups: []string{"orders"}})
			require.NoError(t, err)
			require.Equal(t, 20, pruned)
			require.Zero(t, f.Count(t, f.ES, "watermill_orders"))

			after := f.createOrders(t, 3)
			n, err = c.Run(ctx, f.ordersProjection())
			require.NoError(t, err)
			require.Equal(t, 12, n, "only the new events")
			require.Equal(t, f.maxOffset(t), f.ackedOffset(t))
			f.requireProjected(t, append(before, after...))
			require.Equal(t, 32, f.Count(t, f.RM, "change_log"))
		})
	}
}

// A consumer group whose row went while retention still needed it (an
// operator released a group that was not retired; a consumer that wrote
// its row too late is the same) meets a gap: catch-up, which every term
// starts with, stops there with a *pubsub.TopicGapError naming topic, group
// and range, applying and acknowledging nothing after it. Once the operator
// moves the group past the gap, it goes on with what follows. Not
// parallel: catch-up reads only below pg_snapshot_xmin.
func TestCatchUpStopsAtAGap(t *testing.T) {
	urls := pgtest.NewDB(t)
	f := setup(t, urls)
	ctx := context.Background()
	c := projector.CatchUp{DB: f.ES.DB, SameDB: !urls.Split(), Log: quietLog()}
	before := f.createOrders(t, 2)
	_, err := c.Run(ctx, f.ordersProjection())
	require.NoError(t, err)
	var through pubsub.Position
	var tx string
	require.NoError(t, f.ES.DB.QueryRow(`SELECT m.transaction_id::text, m."offset" FROM watermill_orders m
		ORDER BY m.transaction_id DESC, m."offset" DESC LIMIT 1`).Scan(&tx, &through.Offset))
	through.TransactionID, err = strconv.ParseUint(tx, 10, 64)
	require.NoError(t, err)
	_, err = f.ES.DB.Exec(`UPDATE watermill_orders SET created_at = created_at - interval '8 days'`)
	require.NoError(t, err)
	r, err := pubsub.NewRetention(pubsub.RetentionConfig{DB: f.ES.DB, Keep: 7 * 24 * time.Hour, Batch: 100, Log: quietLog(),
		Topics: []pubsub.RetainedTopic{{Topic: pubsub.TopicOrders, Groups: []string{"orders"}}}})
	require.NoError(t, err)
	pruned, err := r.PruneAll(ctx)
	require.NoError(t, err)
	require.Equal(t, 8, pruned)

	_, err = f.ES.DB.Exec(`DELETE FROM watermill_offsets_orders WHERE consumer_group = 'orders'`)
	require.NoError(t, err)
	after := f.createOrders(t, 1)
	n, err := c.Run(ctx, f.ordersProjection())
	var gap *pubsub.TopicGapError
	require.ErrorAs(t, err, &gap)
	require.Equal(t, &pubsub.TopicGapError{Topic: pubsub.TopicOrders, Group: "orders", Through: through}, gap)
	require.Zero(t, n)
	require.Zero(t, f.ackedOffset(t), "nothing acknowledged past the gap")

	_, err = f.ES.DB.Exec(`UPDATE watermill_offsets_orders SET offset_acked = $1, last_processed_transaction_id = $2::text::xid8
		WHERE consumer_group = 'orders'`, through.Offset, tx)
	require.NoError(t, err)
	n, err = c.Run(ctx, f.ordersProjection())
	require.NoError(t, err)
	require.Equal(t, 4, n, "what follows the gap")
	f.requireProjected(t, append(before, after...))
}
