package projector_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"hearth/adapters/pubsub/projector"
	"hearth/domain/event"
	"hearth/internal/pgtest"
)

// counting wraps the orders projection: it counts the events that reach
// Apply and the batches that reach ApplyBatch, and can hold Apply until
// released.
type counting struct {
	mu      sync.Mutex
	applied int   // events through Apply
	calls   int   // calls of Apply, failed ones included
	batches []int // sizes of the batches through ApplyBatch
	tried   int   // calls of ApplyBatch, failed ones included
	hold    chan struct{}
	held    chan struct{}
	// failBatches makes every batch fail; failCall, when not zero, makes
	// that call of Apply (counted from reset) fail once.
	failBatches bool
	failCall    int
}

func (c *counting) projection(f fixture) projector.Projection {
	p := f.ordersProjection()
	p.Apply = func(ctx context.Context, r event.Recorded) error {
		c.mu.Lock()
		hold := c.hold
		c.hold = nil
		c.calls++
		fail := c.calls == c.failCall
		c.mu.Unlock()
		if hold != nil {
			close(c.held)
			<-hold
		}
		if fail {
			return errors.New("injected: fails once")
		}
		err := f.Orders.Apply(ctx, r)
		if err == nil {
			c.mu.Lock()
			c.applied++
			c.mu.Unlock()
		}
		return err
	}
	p.ApplyBatch = func(ctx context.Context, recs []event.Recorded, also func(context.Context, bun.Tx) error) error {
		c.mu.Lock()
		fail := c.failBatches
		c.tried++
		c.mu.Unlock()
		if fail {
			return errors.New("injected batch failure")
		}
		err := f.Orders.ApplyBatch(ctx, recs, also)
		if err == nil {
			c.mu.Lock()
			c.batches = append(c.batches, len(recs))
			c.mu.Unlock()
		}
		return err
	}
	return p
}

// reset forgets the counts and holds the next Apply until the returned
// release is called.
func (c *counting) reset() (held <-chan struct{}, release func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.applied, c.calls, c.batches, c.tried = 0, 0, nil, 0
	hold := make(chan struct{})
	c.hold, c.held = hold, make(chan struct{})
	return c.held, func() { close(hold) }
}

func (c *counting) counts() (applied int, batches []int, tried int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.applied, append([]int(nil), c.batches...), c.tried
}

// burst projects one order, then holds the live handler on a second one
// while n more orders (4 events each) are written, so that the
// subscriber's next query returns them all at once. It returns the ids of
// the orders after the first.
func burst(t *testing.T, f fixture, urls pgtest.URLs, c *counting, n int) []string {
	t.Helper()
	f.runPipeline(t, urls, 20*time.Millisecond, c.projection(f))
	// The first order may go through the catch-up; the router takes
	// everything after it.
	f.requireProjected(t, []string{f.CreateOrder(t)})
	held, release := c.reset()
	ids := []string{f.CreateOrder(t)}
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the live handler never got the second order")
	}
	ids = append(ids, f.createOrders(t, n)...)
	release()
	f.requireProjected(t, ids)
	return ids
}

// A burst that reached the subscriber in one query is applied in few
// read-model transactions, every event exactly once.
//
// Not parallel: the subscriber reads only below pg_snapshot_xmin, which
// parallel tests hold back, and the burst would then come in pieces (still
// correct, but the test wants one piece).
func TestLookaheadAppliesABurstInOneTransaction(t *testing.T) {
	urls := pgtest.NewDB(t)
	f := setup(t, urls)
	c := &counting{}
	burst(t, f, urls, c, 10)
	applied, batches, _ := c.counts()
	events := applied
	for _, n := range batches {
		events += n
	}
	require.Equal(t, 1+10*4, events, "each event applied once, alone or in a batch (alone: %d, batches: %v)", applied, batches)
	require.NotEmpty(t, batches, "the burst went through ApplyBatch")
	require.Greater(t, slices.Max(batches), 1)
	require.Equal(t, 2+10*4, f.Count(t, f.RM, "change_log"))
}

// When a batch fails, its events are applied one by one, and no second
// batch is tried for the messages of the failed one, nor on a retry of
// the first (whose lone attempt fails once here).
func TestLookaheadFallsBackToOneByOne(t *testing.T) {
	urls := pgtest.NewDB(t)
	f := setup(t, urls)
	// Apply's first call after the reset is the held order's; its second,
	// the burst's first event, alone after the failed batch.
	c := &counting{failBatches: true, failCall: 2}
	burst(t, f, urls, c, 5)
	applied, batches, tried := c.counts()
	require.Empty(t, batches)
	require.Equal(t, 1, tried, "one batch tried, and never again for its messages")
	require.Equal(t, 1+5*4, applied, "every event applied alone, once")
	require.Equal(t, 2+5*4, f.Count(t, f.RM, "change_log"))
}
