package projector_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/internal/pubsubtest"
	"hearth/adapters/pubsub/projector"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
)

// fakeClock records the waits the retry budget asks for and moves on by
// each at once.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waits = append(c.waits, d)
	c.now = c.now.Add(d)
}

// advance moves the clock on without a wait (an attempt that takes d).
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) recorded() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

// realSchedule is Hearth's retry budget as the product promises it: 200 ms
// doubling to 5 s, 10 retries. Written out, not derived from the
// constants, so that changing them fails these tests.
var realSchedule = []time.Duration{
	200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond,
	5 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second,
}

// goChannelRouter runs a router with the real retry schedule on the fake
// clock, fed by gochannel: publish returns once the handler acked the
// message (applied, parked or poisoned). Poisoned messages arrive on the
// returned channel.
func goChannelRouter(t *testing.T, clock *fakeClock, parking *projector.Parking, p projector.Projection) (publish func(env event.Envelope), poisoned <-chan *message.Message) {
	t.Helper()
	ch := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = ch.Close() })
	poison := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 16}, watermill.NopLogger{})
	t.Cleanup(func() { _ = poison.Close() })
	msgs, err := poison.Subscribe(t.Context(), pubsub.TopicPoison)
	require.NoError(t, err)
	router, err := projector.NewRouter(projector.RouterConfig{
		Subscriber: func(string) (message.Subscriber, error) { return ch, nil },
		Poison:     poison,
		Log:        quietLog(),
		RetryClock: clock,
		Parking:    parking,
	}, p)
	require.NoError(t, err)
	pubsubtest.StartRouter(t, router)
	return func(env event.Envelope) {
		t.Helper()
		payload, err := json.Marshal(env)
		require.NoError(t, err)
		acked := make(chan error, 1)
		go func() { acked <- ch.Publish(p.Topic, message.NewMessage(env.ID, payload)) }()
		select {
		case err := <-acked:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Fatalf("event %s was never acked", env.ID)
		}
	}, msgs
}

// envelope is event v of an order stream.
func envelope(t *testing.T, merchantID, streamID string, v int) event.Envelope {
	t.Helper()
	var e event.Event = order.Created{OrderID: streamID, CustomerID: uuid.New(), Status: order.StatusPending}
	if v > 1 {
		e = order.StatusChanged{From: order.StatusPending, To: order.StatusConfirmed}
	}
	data, err := json.Marshal(e)
	require.NoError(t, err)
	return event.Envelope{ID: uuid.New(), Type: e.EventType(), StreamType: order.StreamType, StreamID: streamID, Version: v,
		MerchantID: merchantID, OccurredAt: time.Now().UTC(), CorrelationID: uuid.New(), Actor: "key:test", Data: data}
}

// failing is a projection whose Apply runs fail for the streams it names
// and counts the attempts per event.
type failing struct {
	fail     func(r event.Recorded) error // nil error: applied
	mu       sync.Mutex
	attempts map[string]int // by event id
	applied  []string       // event ids
}

func (f *failing) projection() projector.Projection {
	f.attempts = map[string]int{}
	return projector.Projection{Name: "orders", Topic: pubsub.TopicOrders, Decode: order.Decode,
		Apply: func(ctx context.Context, r event.Recorded) error {
			f.mu.Lock()
			f.attempts[r.ID]++
			f.mu.Unlock()
			if err := f.fail(r); err != nil {
				return err
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			f.applied = append(f.applied, r.ID)
			return nil
		}}
}

func (f *failing) attemptsOf(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts[id]
}

func requirePoisoned(t *testing.T, poisoned <-chan *message.Message, eventID, reason string) {
	t.Helper()
	select {
	case msg := <-poisoned:
		msg.Ack()
		require.Equal(t, eventID, msg.UUID)
		require.Contains(t, msg.Metadata.Get(middleware.ReasonForPoisonedKey), reason)
		require.Equal(t, "orders", msg.Metadata.Get(middleware.PoisonedHandlerKey))
	case <-time.After(10 * time.Second): // gochannel hands it over asynchronously
		t.Fatalf("event %s was not poisoned", eventID)
	}
}

// A failing event is retried on the real schedule (200 ms doubling to 5 s,
// 10 retries) and the 11th failure poisons it.
func TestRetryScheduleThenPoison(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	f := &failing{fail: func(event.Recorded) error { return errors.New("boom") }}
	publish, poisoned := goChannelRouter(t, clock, nil, f.projection())
	env := envelope(t, uuid.New(), uuid.New(), 1)
	publish(env)
	require.Equal(t, realSchedule, clock.recorded())
	require.Equal(t, 11, f.attemptsOf(env.ID), "one attempt and 10 retries")
	requirePoisoned(t, poisoned, env.ID, "boom")
}

// The budget also ends when its elapsed time would pass a minute: with
// attempts of 10 s each, the sixth failure poisons.
func TestRetryBudgetBoundedInTime(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	f := &failing{fail: func(event.Recorded) error {
		clock.advance(10 * time.Second)
		return errors.New("slow boom")
	}}
	publish, poisoned := goChannelRouter(t, clock, nil, f.projection())
	env := envelope(t, uuid.New(), uuid.New(), 1)
	publish(env)
	require.Equal(t, realSchedule[:5], clock.recorded())
	require.Equal(t, 6, f.attemptsOf(env.ID))
	requirePoisoned(t, poisoned, env.ID, "slow boom")
}

// A panicking handler is recovered: its event is retried on the same
// schedule and poisoned, and the router goes on applying other events.
func TestPanickingHandlerIsRetriedThenPoisoned(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	bad := uuid.New()
	f := &failing{fail: func(r event.Recorded) error {
		if r.StreamID == bad {
			panic("projection bug")
		}
		return nil
	}}
	publish, poisoned := goChannelRouter(t, clock, nil, f.projection())
	env := envelope(t, uuid.New(), bad, 1)
	publish(env)
	require.Equal(t, realSchedule, clock.recorded())
	require.Equal(t, 11, f.attemptsOf(env.ID))
	requirePoisoned(t, poisoned, env.ID, "projection bug")

	good := envelope(t, uuid.New(), uuid.New(), 1)
	publish(good)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Equal(t, []string{good.ID}, f.applied, "the router still runs")
}

// A payload that cannot be decoded is poisoned at once: no retry can fix
// it.
func TestUndecodableEventPoisonedWithoutRetries(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	f := &failing{fail: func(event.Recorded) error { return nil }}
	publish, poisoned := goChannelRouter(t, clock, nil, f.projection())
	env := envelope(t, uuid.New(), uuid.New(), 1)
	env.Type = "OrderVanished"
	publish(env)
	require.Empty(t, clock.recorded(), "no wait")
	require.Zero(t, f.attemptsOf(env.ID))
	requirePoisoned(t, poisoned, env.ID, "OrderVanished")
}

// Parking through gochannel: the event that spent its budget parks its
// aggregate (after the real schedule), the aggregate's later events wait
// without an attempt, and other aggregates are applied.
func TestSpentBudgetParksAggregate(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	clock := newFakeClock()
	bad := uuid.New()
	var broken atomic.Bool
	broken.Store(true)
	proj := &failing{fail: func(r event.Recorded) error {
		if r.StreamID == bad && broken.Load() {
			return errors.New("cannot apply")
		}
		return nil
	}}
	p := proj.projection()
	parking, err := projector.NewParking(f.ES, p)
	require.NoError(t, err)
	publish, poisoned := goChannelRouter(t, clock, parking, p)

	first := envelope(t, f.MerchantID, bad, 1)
	publish(first)
	require.Equal(t, realSchedule, clock.recorded())
	requirePoisoned(t, poisoned, first.ID, "cannot apply")
	parked, err := parking.Get(t.Context(), "orders", bad)
	require.NoError(t, err)
	require.Equal(t, first.ID, parked.FirstEventID)
	require.Equal(t, 1, parked.FirstVersion)

	second := envelope(t, f.MerchantID, bad, 2)
	publish(second)
	require.Zero(t, proj.attemptsOf(second.ID), "held back, not attempted")
	other := envelope(t, f.MerchantID, uuid.New(), 1)
	publish(other)
	require.Equal(t, 1, proj.attemptsOf(other.ID))
	parked, err = parking.Get(t.Context(), "orders", bad)
	require.NoError(t, err)
	require.Equal(t, 2, parked.Waiting)
	require.Len(t, clock.recorded(), len(realSchedule), "no more waits")
}

// An event whose budget is spent on a database out of reach (the read
// model's server down for longer than the budget) is neither poisoned nor
// parked: it is tried again, a budget at a time, until the database is
// back, and applied then.
func TestUnreachableDatabaseNeitherParksNorPoisons(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	clock := newFakeClock()
	down := 2*(len(realSchedule)+1) + 3 // two budgets and then some
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	var tries atomic.Int32
	proj := &failing{fail: func(event.Recorded) error {
		if int(tries.Add(1)) <= down {
			return fmt.Errorf("apply: %w", refused)
		}
		return nil
	}}
	p := proj.projection()
	parking, err := projector.NewParking(f.ES, p)
	require.NoError(t, err)
	publish, poisoned := goChannelRouter(t, clock, parking, p)

	env := envelope(t, f.MerchantID, uuid.New(), 1)
	publish(env) // returns once acked: applied
	require.Equal(t, down+1, proj.attemptsOf(env.ID))
	require.Equal(t, []string{env.ID}, proj.applied)
	_, err = parking.Get(t.Context(), "orders", env.StreamID)
	require.ErrorIs(t, err, apperr.ErrNotFound, "not parked")
	select {
	case msg := <-poisoned:
		t.Fatalf("poisoned: %s", msg.Metadata.Get(middleware.ReasonForPoisonedKey))
	default:
	}
}
