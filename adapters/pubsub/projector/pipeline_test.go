package projector_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/internal/pubsubtest"
	"hearth/adapters/pubsub/projector"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/internal/pgtest"
)

func quietLog() *slog.Logger {
	if os.Getenv("DEBUGLOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func (f fixture) ordersProjection() projector.Projection {
	return projector.Projection{Name: "orders", Topic: pubsub.TopicOrders, Decode: order.Decode,
		Apply: f.Orders.Apply, ApplyBatch: f.Orders.ApplyBatch}
}

// createOrders creates n orders with three status changes each (4 events).
func (f fixture) createOrders(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		id := f.CreateOrder(t)
		ids = append(ids, id)
		for _, st := range []order.Status{order.StatusConfirmed, order.StatusInService, order.StatusCompleted} {
			_, err := f.Update(context.Background(), id, nil, func(o *order.Order) error {
				return o.ChangeStatus(st, time.Now())
			})
			require.NoError(t, err)
		}
	}
	return ids
}

func (f fixture) ackedOffset(t *testing.T) int64 {
	t.Helper()
	var off int64
	require.NoError(t, f.ES.DB.QueryRow(`SELECT offset_acked FROM watermill_offsets_orders WHERE consumer_group = 'orders'`).Scan(&off))
	return off
}

func (f fixture) maxOffset(t *testing.T) int64 {
	t.Helper()
	var off int64
	require.NoError(t, f.ES.DB.QueryRow(`SELECT max("offset") FROM watermill_orders`).Scan(&off))
	return off
}

// run builds the projector cfg describes and runs it until ctx ends.
func run(ctx context.Context, cfg projector.Config) error {
	pr, err := projector.New(cfg)
	if err != nil {
		return err
	}
	return pr.Run(ctx)
}

// runPipeline runs the whole pipeline until the test ends.
func (f fixture) runPipeline(t *testing.T, urls pgtest.URLs, fallback time.Duration, projections ...projector.Projection) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, projector.Config{
			EventStore: f.ES.DB, ConnString: urls.EventStore, SameDB: !urls.Split(),
			Fallback: fallback, Log: quietLog(), RetryInitial: time.Millisecond, CatchUpPageSize: 7,
			Projections: projections,
		})
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// The catch-up tests are not parallel: a page reads only below
// pg_snapshot_xmin, which any transaction of a parallel test in the cluster
// holds back, and a short page ends the catch-up.

// Catch-up applies a backlog page by page with every guarantee, moves the
// offset past each page, and a second run (or a rewound offset) changes
// nothing.
func TestCatchUpAppliesBacklogInPages(t *testing.T) {
	for name, newDB := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			urls := newDB(t)
			f := setup(t, urls)
			ids := f.createOrders(t, 10)
			c := projector.CatchUp{DB: f.ES.DB, SameDB: !urls.Split(), PageSize: 7, Log: quietLog()}
			ctx := context.Background()
			n, err := c.Run(ctx, f.ordersProjection())
			require.NoError(t, err)
			require.Equal(t, 40, n)
			require.Equal(t, f.maxOffset(t), f.ackedOffset(t))
			f.requireProjected(t, ids)
			require.Equal(t, 40, f.Count(t, f.RM, "change_log"))

			n, err = c.Run(ctx, f.ordersProjection())
			require.NoError(t, err)
			require.Zero(t, n, "nothing left")

			_, err = f.ES.DB.Exec(`UPDATE watermill_offsets_orders SET offset_acked = 0, last_processed_transaction_id = '0'`)
			require.NoError(t, err)
			n, err = c.Run(ctx, f.ordersProjection())
			require.NoError(t, err)
			require.Equal(t, 40, n, "redelivered")
			require.Equal(t, 40, f.Count(t, f.RM, "change_log"), "redelivery writes no change-log row")
			f.requireProjected(t, ids)
		})
	}
}

// Two consumers of a topic catching up in one process (Pages) share the
// full pages: each is read once, and both consumers get every event in
// order and move their own offsets.
func TestCatchUpSharesPagesBetweenConsumers(t *testing.T) {
	urls := pgtest.NewDB(t)
	f := setup(t, urls)
	f.createOrders(t, 7) // 28 events: four full pages of 7 (as many as Pages keeps), then none
	pages := projector.NewPages()
	// Both consumers are known before either reads (in a process, the
	// first page may go before the other has joined).
	defer pages.Join(pubsub.TopicOrders, "first")()
	defer pages.Join(pubsub.TopicOrders, "second")()
	c := projector.CatchUp{DB: f.ES.DB, SameDB: !urls.Split(), PageSize: 7, Log: quietLog(), Pages: pages}
	var want []string
	rows, err := f.ES.DB.Query(`SELECT uuid FROM watermill_orders ORDER BY transaction_id, "offset"`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		want = append(want, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, want, 28)
	seen := map[string][]string{}
	var mu sync.Mutex
	recorder := func(name string) projector.Projection {
		return projector.Projection{Name: name, Topic: pubsub.TopicOrders, Decode: order.Decode,
			ApplyBatch: func(ctx context.Context, recs []event.Recorded, also func(context.Context, bun.Tx) error) error {
				mu.Lock()
				for _, r := range recs {
					seen[name] = append(seen[name], r.ID)
				}
				mu.Unlock()
				if also == nil {
					return nil
				}
				return f.ES.RunInTx(ctx, nil, also)
			}}
	}
	var wg sync.WaitGroup
	for _, name := range []string{"first", "second"} {
		wg.Go(func() {
			n, err := c.Run(context.Background(), recorder(name))
			require.NoError(t, err)
			require.Equal(t, 28, n)
		})
	}
	wg.Wait()
	require.Equal(t, want, seen["first"])
	require.Equal(t, want, seen["second"])
	read, shared := pages.Stats()
	require.GreaterOrEqual(t, shared, int64(4), "every full page was read once")
	require.Equal(t, int64(10), read+shared, "five pages for each consumer")
	for _, group := range []string{"first", "second"} {
		var acked int64
		require.NoError(t, f.ES.DB.QueryRow(`SELECT offset_acked FROM watermill_offsets_orders WHERE consumer_group = $1`, group).Scan(&acked))
		require.Equal(t, f.maxOffset(t), acked, group)
	}
}

// A page that fails is rolled back with its offset, catch-up stops there,
// and the live subscriber carries on from the last good page.
func TestCatchUpHandsOverAtAFailingPage(t *testing.T) {
	for name, newDB := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			urls := newDB(t)
			f := setup(t, urls)
			ids := f.createOrders(t, 5)
			injected := errors.New("injected failure in the second page")
			pages := 0
			p := f.ordersProjection()
			p.ApplyBatch = func(ctx context.Context, recs []event.Recorded, also func(context.Context, bun.Tx) error) error {
				pages++
				return f.Orders.ApplyBatch(ctx, recs, func(ctx context.Context, tx bun.Tx) error {
					if also != nil {
						if err := also(ctx, tx); err != nil {
							return err
						}
					}
					if pages == 2 {
						return injected
					}
					return nil
				})
			}
			n, err := projector.CatchUp{DB: f.ES.DB, SameDB: !urls.Split(), PageSize: 7, Log: quietLog()}.Run(context.Background(), p)
			require.NoError(t, err)
			require.Equal(t, 7, n, "only the first page")
			require.Equal(t, 7, f.Count(t, f.RM, "change_log"), "the failed page left nothing")
			var seventh int64
			require.NoError(t, f.ES.DB.QueryRow(`SELECT "offset" FROM watermill_orders ORDER BY transaction_id, "offset" OFFSET 6 LIMIT 1`).Scan(&seventh))
			require.Equal(t, seventh, f.ackedOffset(t), "the offset stops after the first page")

			f.runPipeline(t, urls, 20*time.Millisecond, f.ordersProjection())
			f.requireProjected(t, ids)
		})
	}
}

// An idle subscriber wakes on NOTIFY: with a fallback poll of an hour, new
// events are projected all the same, also after the LISTEN connection was
// killed (it reconnects by itself).
func TestNotifyWakesSubscriberAndReconnects(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	f := setup(t, urls)
	f.runPipeline(t, urls, time.Hour, f.ordersProjection())
	listener := func() (pid int) {
		err := f.ES.DB.QueryRow(`SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()
			AND query ILIKE 'LISTEN%'`, projector.NotifyApplicationName).Scan(&pid)
		if err != nil {
			return 0
		}
		return pid
	}
	require.Eventually(t, func() bool { return listener() != 0 }, 10*time.Second, 5*time.Millisecond)

	first := f.CreateOrder(t)
	f.requireProjected(t, []string{first})
	second := f.CreateOrder(t) // the subscriber is idle now: only a notification wakes it
	f.requireProjected(t, []string{second})

	old := listener()
	_, err := f.ES.DB.Exec(`SELECT pg_terminate_backend($1)`, old)
	require.NoError(t, err)
	require.Eventually(t, func() bool { p := listener(); return p != 0 && p != old }, 10*time.Second, 5*time.Millisecond)
	third := f.CreateOrder(t)
	f.requireProjected(t, []string{third})
}

// Without any notification (the notifier is not running), the fallback
// poll still delivers.
func TestFallbackPollWithoutNotifications(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	n, err := projector.NewNotifier("postgres://nobody@127.0.0.1:1/none", quietLog())
	require.NoError(t, err)
	poison, err := projector.SQLPublisher(f.ES.DB, quietLog())
	require.NoError(t, err)
	router, err := projector.NewRouter(projector.RouterConfig{
		Subscriber: projector.NotifyingSubscribers(projector.SubscribersConfig{DB: f.ES.DB, Notifier: n, Fallback: 20 * time.Millisecond, Log: quietLog()}),
		Poison:     poison,
		Log:        quietLog(),
	}, f.ordersProjection())
	require.NoError(t, err)
	pubsubtest.StartRouter(t, router)
	ids := f.createOrders(t, 2)
	f.requireProjected(t, ids)
}

// Guarantee 7: while one projection's handler fails on every event (its
// retry budget of about 31 s running), another projection sees events
// committed after the failure started. With watermill-sql's default
// offsets adapter, the failing subscriber's transaction holds a transaction
// id (FOR UPDATE) for the whole budget, and the later event stays invisible
// to every subscriber until the budget ends.
//
// Not parallel: when broken, it would stall the other tests' subscribers.
func TestFailingProjectionDoesNotHoldUpOthers(t *testing.T) {
	urls := pgtest.NewDB(t)
	f := setup(t, urls)
	attempts := make(chan struct{}, 100)
	failing := projector.Projection{Name: "failing", Topic: pubsub.TopicOrders, Decode: order.Decode,
		Apply: func(ctx context.Context, r event.Recorded) error {
			select {
			case attempts <- struct{}{}:
			default:
			}
			return errors.New("always fails")
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, projector.Config{EventStore: f.ES.DB, ConnString: urls.EventStore, SameDB: true,
			Fallback: 20 * time.Millisecond, Log: quietLog(), Projections: []projector.Projection{f.ordersProjection(), failing}})
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	first := f.CreateOrder(t)
	<-attempts
	<-attempts // the failing handler is in its retry budget now
	second := f.CreateOrder(t)
	f.requireProjected(t, []string{first, second})
	require.Zero(t, f.Count(t, f.ES, "watermill_poison"), "the failing event is still within its budget")
}
