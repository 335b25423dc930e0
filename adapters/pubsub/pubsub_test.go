package pubsub_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"hearth/adapters/pubsub"
	"hearth/adapters/readmodel"
	"hearth/app/apperr"
	"hearth/app/command"
	"hearth/app/event"
	"hearth/app/order"
	"hearth/app/query"
	"hearth/app/uuid"
	"hearth/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

type fixture struct {
	es, rm     *bun.DB
	store      *pubsub.Store
	tx         *pubsub.Transactor
	orderCmds  command.OrderHandlers
	orders     *readmodel.Orders
	merchantID string
	customerID string
}

func setup(t *testing.T, urls pgtest.URLs) fixture {
	t.Helper()
	f := fixture{es: pgtest.Open(t, urls.EventStore), rm: pgtest.Open(t, urls.ReadModel)}
	var err error
	f.store, err = pubsub.NewStore(f.es, nil)
	require.NoError(t, err)
	f.tx, err = pubsub.NewTransactor(f.store)
	require.NoError(t, err)
	f.orderCmds, err = command.NewOrderHandlers(f.tx)
	require.NoError(t, err)
	f.orders, err = readmodel.NewOrders(f.rm)
	require.NoError(t, err)
	f.merchantID, f.customerID = uuid.New(), uuid.New()
	_, err = f.es.DB.Exec(`INSERT INTO merchants (id, name) VALUES ($1, $2)`, f.merchantID, "m-"+f.merchantID)
	require.NoError(t, err)
	_, err = f.es.DB.Exec(`INSERT INTO customers (id, merchant_id, name) VALUES ($1, $2, 'Ada')`, f.customerID, f.merchantID)
	require.NoError(t, err)
	return f
}

func (f fixture) meta() event.Meta {
	return event.Meta{MerchantID: f.merchantID, Actor: "key:test", CorrelationID: uuid.New(), OccurredAt: time.Now()}
}

func (f fixture) createOrder(t *testing.T) string {
	t.Helper()
	w, err := f.orderCmds.Create(context.Background(), command.CreateOrder{Meta: f.meta(), CustomerID: f.customerID, AmountCents: 500})
	require.NoError(t, err)
	return w.Stream[0].StreamID
}

// update runs fn on one order in one transaction, as the command handlers do.
func (f fixture) update(ctx context.Context, id string, expected *int, fn func(o *order.Order) error) (command.Written, error) {
	out, err := f.tx.Run(ctx, f.meta(), func(ctx context.Context, s command.Session) error {
		o, err := s.Order(ctx, id)
		if err != nil {
			return err
		}
		if expected != nil && *expected != o.Version() {
			return &apperr.ConflictError{Detail: "stale"}
		}
		return fn(o)
	})
	return out.Of(id), err
}

func (f fixture) count(t *testing.T, db *bun.DB, table string) int {
	t.Helper()
	var n int
	require.NoError(t, db.DB.QueryRow(`SELECT count(*) FROM `+table).Scan(&n))
	return n
}

// runRouter runs the projections over the real SQL transport until the test
// ends.
func (f fixture) runRouter(t *testing.T, projections ...pubsub.Projection) {
	t.Helper()
	f.runRouterWith(t, nil, projections...)
}

// runRouterWith is runRouter with parking (nil: none).
func (f fixture) runRouterWith(t *testing.T, parking *pubsub.Parking, projections ...pubsub.Projection) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	poison, err := pubsub.SQLPublisher(f.es.DB, log)
	require.NoError(t, err)
	if len(projections) == 0 {
		projections = []pubsub.Projection{{Name: "orders", Topic: pubsub.TopicOrders, Decode: order.Decode, Apply: f.orders.Apply}}
	}
	router, err := pubsub.NewRouter(pubsub.RouterConfig{
		Subscriber:   pubsub.SQLSubscribers(f.es.DB, log, 10*time.Millisecond),
		Poison:       poison,
		Log:          log,
		RetryInitial: time.Millisecond,
		Parking:      parking,
	}, projections...)
	require.NoError(t, err)
	startRouter(t, router)
}

func startRouter(t *testing.T, router *message.Router) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-done:
		t.Fatalf("router stopped at once: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// stream reads an order's events back from the store.
func (f fixture) stream(t *testing.T, id string) []event.Recorded {
	t.Helper()
	recs, err := f.store.Read(context.Background(), pubsub.OrderStream, f.merchantID, id)
	require.NoError(t, err)
	return recs
}

// Guarantee 1: a command that fails publishes nothing, even after some of
// its events were written and published inside the transaction.
func TestRolledBackCommandPublishesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	taken := f.createOrder(t)
	fresh, err := order.New(order.NewOrder{ID: uuid.New(), CustomerID: f.customerID})
	require.NoError(t, err)
	clashing, err := order.New(order.NewOrder{ID: taken, CustomerID: f.customerID})
	require.NoError(t, err)
	// fresh is appended and published first; clashing then fails, as its
	// version 1 exists already.
	_, err = f.tx.Run(context.Background(), f.meta(), func(ctx context.Context, s command.Session) error {
		s.AddOrder(fresh)
		s.AddOrder(clashing)
		return nil
	})
	var conflict *apperr.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, 1, f.count(t, f.es, "events"), "only the earlier command's event")
	require.Equal(t, 1, f.count(t, f.es, "watermill_orders"))
	_, err = f.store.Read(context.Background(), pubsub.OrderStream, f.merchantID, fresh.ID())
	require.ErrorIs(t, err, apperr.ErrNotFound)

	// A decision that fails inside Update appends nothing either.
	injected := errors.New("injected failure after the decision")
	_, err = f.update(context.Background(), taken, nil, func(o *order.Order) error {
		require.NoError(t, o.ChangeStatus(order.StatusConfirmed, time.Now()))
		return injected
	})
	require.ErrorIs(t, err, injected)
	require.Equal(t, 1, f.count(t, f.es, "events"))
	require.Equal(t, 1, f.count(t, f.es, "watermill_orders"), "the committed command is published, the failed one is not")
}

// Guarantee 2: of concurrent commands that read the same version of one
// order, exactly one wins and the others get a conflict.
func TestConcurrentCommandsOneWins(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	id := f.createOrder(t)
	const writers = 8
	var loaded sync.WaitGroup
	loaded.Add(writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			v := 1
			_, errs[i] = f.update(context.Background(), id, &v, func(o *order.Order) error {
				loaded.Done()
				loaded.Wait() // every writer has read version 1 before any appends
				return o.UpdateDetails(order.Details{CustomerID: f.customerID, AmountCents: int64(1000 + i)})
			})
		})
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		if err == nil {
			wins++
			continue
		}
		var conflict *apperr.ConflictError
		require.ErrorAs(t, err, &conflict)
	}
	require.Equal(t, 1, wins)
	require.Len(t, f.stream(t, id), 2)

	// A stale expected version is a conflict before anything is decided.
	stale := 1
	_, err := f.update(context.Background(), id, &stale, func(o *order.Order) error {
		t.Fatal("must not decide on a stale version")
		return nil
	})
	require.ErrorAs(t, err, new(*apperr.ConflictError))
}

func TestLoadHidesOtherMerchantsStreams(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	id := f.createOrder(t)
	other := f.meta()
	other.MerchantID = uuid.New()
	_, err := f.tx.Run(context.Background(), other, func(ctx context.Context, s command.Session) error {
		_, err := s.Order(ctx, id)
		return err
	})
	require.ErrorIs(t, err, apperr.ErrNotFound)
}

// Guarantees 3 and 4 end to end over the real transport, in both layouts:
// every row equals the fold of its events, with one change-log row per event.
func TestPipelineProjectsEveryEventOnce(t *testing.T) {
	t.Parallel()
	for name, newDB := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, newDB(t))
			f.runRouter(t)
			var ids []string
			for range 20 {
				id := f.createOrder(t)
				ids = append(ids, id)
				for _, st := range []order.Status{order.StatusConfirmed, order.StatusInService, order.StatusCompleted} {
					_, err := f.update(context.Background(), id, nil, func(o *order.Order) error {
						return o.ChangeStatus(st, time.Now())
					})
					require.NoError(t, err)
				}
			}
			f.requireProjected(t, ids)

			// Redelivery: rewind the consumer group to the start. Everything is
			// delivered again and nothing changes.
			before := f.count(t, f.rm, "change_log")
			_, err := f.es.DB.Exec(`UPDATE watermill_offsets_orders SET offset_acked = 0, last_processed_transaction_id = '0'`)
			require.NoError(t, err)
			lastOffset := func() int64 {
				var off int64
				require.NoError(t, f.es.DB.QueryRow(`SELECT offset_acked FROM watermill_offsets_orders WHERE consumer_group = 'orders'`).Scan(&off))
				return off
			}
			var maxOffset int64
			require.NoError(t, f.es.DB.QueryRow(`SELECT max("offset") FROM watermill_orders`).Scan(&maxOffset))
			require.Eventually(t, func() bool { return lastOffset() == maxOffset }, 10*time.Second, 10*time.Millisecond)
			require.Equal(t, before, f.count(t, f.rm, "change_log"), "redelivery writes no change-log row")
			f.requireProjected(t, ids)
		})
	}
}

func (f fixture) requireProjected(t *testing.T, ids []string) {
	t.Helper()
	scope := query.Scope{MerchantID: f.merchantID}
	for _, id := range ids {
		want, err := query.FoldOrder(f.stream(t, id))
		require.NoError(t, err)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got, err := f.orders.Get(context.Background(), scope, id)
			require.NoError(c, err)
			require.Equal(c, want, got)
		}, 10*time.Second, 10*time.Millisecond)
		changes, err := f.orders.Changes(context.Background(), scope, "order", id)
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
	id := f.createOrder(t)
	for _, st := range []order.Status{order.StatusConfirmed, order.StatusDispatching} {
		_, err := f.update(context.Background(), id, nil, func(o *order.Order) error {
			return o.ChangeStatus(st, time.Now())
		})
		require.NoError(t, err)
	}
	stream := f.stream(t, id)
	ctx := context.Background()
	scope := query.Scope{MerchantID: f.merchantID}

	require.NoError(t, f.orders.Apply(ctx, stream[0]))
	var gap *readmodel.GapError
	require.ErrorAs(t, f.orders.Apply(ctx, stream[2]), &gap, "version 3 does not follow version 1")
	require.Equal(t, 1, gap.RowVersion)
	got, err := f.orders.Get(ctx, scope, id)
	require.NoError(t, err)
	require.Equal(t, 1, got.Version)
	require.Equal(t, "pending", got.Status)
	require.Equal(t, 1, f.count(t, f.rm, "change_log"))

	require.NoError(t, f.orders.Apply(ctx, stream[1]))
	require.NoError(t, f.orders.Apply(ctx, stream[2]))
	snapshot, err := f.orders.Get(ctx, scope, id)
	require.NoError(t, err)
	for _, r := range stream {
		require.NoError(t, f.orders.Apply(ctx, r), "redelivery of v%d", r.Version)
	}
	again, err := f.orders.Get(ctx, scope, id)
	require.NoError(t, err)
	require.Equal(t, snapshot, again)
	require.Equal(t, 3, f.count(t, f.rm, "change_log"))
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
	failing := pubsub.Projection{Name: "failing", Topic: pubsub.TopicOrders, Decode: order.Decode,
		Apply: func(ctx context.Context, r event.Recorded) error {
			n, _ := attempts.LoadOrStore(r.ID, new(int))
			*n.(*int)++
			return errors.New("boom")
		}}
	f.runRouter(t, failing)
	id := f.createOrder(t)
	eventID := f.stream(t, id)[0].ID
	require.Eventually(t, func() bool { return f.count(t, f.es, "watermill_poison") == 1 }, 20*time.Second, 20*time.Millisecond)
	var uuidCol, reason string
	require.NoError(t, f.es.DB.QueryRow(`SELECT uuid, metadata->>'reason_poisoned' FROM watermill_poison`).Scan(&uuidCol, &reason))
	require.Equal(t, eventID, uuidCol)
	require.Contains(t, reason, "boom")
	n, _ := attempts.Load(eventID)
	require.Equal(t, pubsub.RetryCount+1, *n.(*int), "one attempt and every retry")
}

// The transport can be swapped for gochannel in handler-level tests.
func TestGoChannelTransport(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	ch := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = ch.Close() })
	router, err := pubsub.NewRouter(pubsub.RouterConfig{
		Subscriber: func(string) (message.Subscriber, error) { return ch, nil },
		Poison:     ch,
	}, pubsub.Projection{Name: "orders", Topic: pubsub.TopicOrders, Decode: order.Decode, Apply: f.orders.Apply})
	require.NoError(t, err)
	startRouter(t, router)

	id := f.createOrder(t)
	stream := f.stream(t, id)
	payload, err := json.Marshal(stream[0].Envelope)
	require.NoError(t, err)
	require.NoError(t, ch.Publish(pubsub.TopicOrders, message.NewMessage(stream[0].ID, payload)))
	got, err := f.orders.Get(context.Background(), query.Scope{MerchantID: f.merchantID}, id)
	require.NoError(t, err, "published with BlockPublishUntilSubscriberAck: applied by now")
	require.Equal(t, 1, got.Version)
}
