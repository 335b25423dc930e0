package projector_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/internal/pubsubtest"
	"hearth/adapters/pubsub/projector"
	"hearth/adapters/readmodel"
	"hearth/app/query"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// fixture is the shared fixture (pubsubtest.Fixture), extended by the tests.
type fixture struct{ pubsubtest.Fixture }

func setup(t *testing.T, urls pgtest.URLs) fixture { return fixture{pubsubtest.Setup(t, urls)} }

// Guarantees 3 and 4 end to end over the real transport, in both layouts:
// every row equals the fold of its events, with one change-log row per event.
func TestPipelineProjectsEveryEventOnce(t *testing.T) {
	t.Parallel()
	for name, newDB := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, newDB(t))
			f.RunRouter(t)
			var ids []string
			for range 20 {
				id := f.CreateOrder(t)
				ids = append(ids, id)
				for _, st := range []order.Status{order.StatusConfirmed, order.StatusInService, order.StatusCompleted} {
					_, err := f.Update(context.Background(), id, nil, func(o *order.Order) error {
						return o.ChangeStatus(st, time.Now())
					})
					require.NoError(t, err)
				}
			}
			f.requireProjected(t, ids)

			// Redelivery: rewind the consumer group to the start. Everything is
			// delivered again and nothing changes.
			before := f.Count(t, f.RM, "change_log")
			_, err := f.ES.DB.Exec(`UPDATE watermill_offsets_orders SET offset_acked = 0, last_processed_transaction_id = '0'`)
			require.NoError(t, err)
			lastOffset := func() int64 {
				var off int64
				require.NoError(t, f.ES.DB.QueryRow(`SELECT offset_acked FROM watermill_offsets_orders WHERE consumer_group = 'orders'`).Scan(&off))
				return off
			}
			var maxOffset int64
			require.NoError(t, f.ES.DB.QueryRow(`SELECT max("offset") FROM watermill_orders`).Scan(&maxOffset))
			require.Eventually(t, func() bool { return lastOffset() == maxOffset }, 10*time.Second, 10*time.Millisecond)
			require.Equal(t, before, f.Count(t, f.RM, "change_log"), "redelivery writes no change-log row")
			f.requireProjected(t, ids)
		})
	}
}

func (f fixture) requireProjected(t *testing.T, ids []string) {
	t.Helper()
	scope := query.Scope{MerchantID: f.MerchantID}
	for _, id := range ids {
		want, err := query.FoldOrder(f.Stream(t, id))
		require.NoError(t, err)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got, err := f.Orders.Get(context.Background(), scope, id)
			require.NoError(c, err)
			require.Equal(c, want, got)
		}, 10*time.Second, 10*time.Millisecond)
		changes, err := f.Orders.Changes(context.Background(), scope, "order", id)
		require.NoError(t, err)
		require.Len(t, changes, want.Version, "one change-log row per event")
		for i, c := range changes {
			require.Equal(t, i+1, c.Version)
		}
	}
}

// Guarantee 4: a repeated event changes nothing; an event whose predecessor
// is missing is refused, not applied.
func TestProjectionVersionGuardAndGapCheck(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	id := f.CreateOrder(t)
	for _, st := range []order.Status{order.StatusConfirmed, order.StatusDispatching} {
		_, err := f.Update(context.Background(), id, nil, func(o *order.Order) error {
			return o.ChangeStatus(st, time.Now())
		})
		require.NoError(t, err)
	}
	stream := f.Stream(t, id)
	ctx := context.Background()
	scope := query.Scope{MerchantID: f.MerchantID}

	require.NoError(t, f.Orders.Apply(ctx, stream[0]))
	var gap *readmodel.GapError
	require.ErrorAs(t, f.Orders.Apply(ctx, stream[2]), &gap, "version 3 does not follow version 1")
	require.Equal(t, 1, gap.RowVersion)
	got, err := f.Orders.Get(ctx, scope, id)
	require.NoError(t, err)
	require.Equal(t, 1, got.Version)
	require.Equal(t, "pending", got.Status)
	require.Equal(t, 1, f.Count(t, f.RM, "change_log"))

	require.NoError(t, f.Orders.Apply(ctx, stream[1]))
	require.NoError(t, f.Orders.Apply(ctx, stream[2]))
	snapshot, err := f.Orders.Get(ctx, scope, id)
	require.NoError(t, err)
	for _, r := range stream {
		require.NoError(t, f.Orders.Apply(ctx, r), "redelivery of v%d", r.Version)
	}
	again, err := f.Orders.Get(ctx, scope, id)
	require.NoError(t, err)
	require.Equal(t, snapshot, again)
	require.Equal(t, 3, f.Count(t, f.RM, "change_log"))
}

// A handler that fails on every event exhausts its retry budget, and the
// event goes to the poison topic with the reason; the subscriber moves on.
//
// Not parallel: while a handler retries, its subscriber's transaction holds
// a transaction id, which holds back pg_snapshot_xmin for every database of
// the cluster and so stalls the other tests' subscribers (architecture.md).
func TestPoisonQueueAfterRetryBudget(t *testing.T) {
	f := setup(t, pgtest.NewDB(t))
	var attempts sync.Map
	failing := projector.Projection{Name: "failing", Topic: pubsub.TopicOrders, Decode: order.Decode,
		Apply: func(ctx context.Context, r event.Recorded) error {
			n, _ := attempts.LoadOrStore(r.ID, new(int))
			*n.(*int)++
			return errors.New("boom")
		}}
	f.RunRouter(t, failing)
	id := f.CreateOrder(t)
	eventID := f.Stream(t, id)[0].ID
	require.Eventually(t, func() bool { return f.Count(t, f.ES, "watermill_poison") == 1 }, 20*time.Second, 20*time.Millisecond)
	var uuidCol, reason string
	require.NoError(t, f.ES.DB.QueryRow(`SELECT uuid, metadata->>'reason_poisoned' FROM watermill_poison`).Scan(&uuidCol, &reason))
	require.Equal(t, eventID, uuidCol)
	require.Contains(t, reason, "boom")
	n, _ := attempts.Load(eventID)
	require.Equal(t, projector.RetryCount+1, *n.(*int), "one attempt and every retry")
}

// The transport can be swapped for gochannel in handler-level tests.
func TestGoChannelTransport(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	ch := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = ch.Close() })
	router, err := projector.NewRouter(projector.RouterConfig{
		Subscriber: func(string) (message.Subscriber, error) { return ch, nil },
		Poison:     ch,
	}, projector.Projection{Name: "orders", Topic: pubsub.TopicOrders, Decode: order.Decode, Apply: f.Orders.Apply})
	require.NoError(t, err)
	pubsubtest.StartRouter(t, router)

	id := f.CreateOrder(t)
	stream := f.Stream(t, id)
	payload, err := json.Marshal(stream[0].Envelope)
	require.NoError(t, err)
	require.NoError(t, ch.Publish(pubsub.TopicOrders, message.NewMessage(stream[0].ID, payload)))
	got, err := f.Orders.Get(context.Background(), query.Scope{MerchantID: f.MerchantID}, id)
	require.NoError(t, err, "published with BlockPublishUntilSubscriberAck: applied by now")
	require.Equal(t, 1, got.Version)
}
