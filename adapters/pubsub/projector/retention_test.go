package projector_test

import (
	"context"
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
