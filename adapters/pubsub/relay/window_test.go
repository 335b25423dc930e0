package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"hearth/app/command"
	"hearth/domain/order"
	"hearth/internal/pgtest"
)

// Pages 25 times the window, the NATS server stopped while a backlog is
// being relayed and started again: every event reaches the stream once, in
// order per aggregate (a page is published again from its first message
// not acknowledged).
func TestRelayPagesLargerThanTheWindowSurviveNATSRestart(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	f.write(150).wait(t) // a backlog: 510 events, in pages of 100
	cfg := f.config()
	cfg.PageSize, cfg.Window = 100, 4
	in := f.startInstance(t, "a", cfg)
	w := f.write(20) // and live events
	require.Eventually(t, func() bool { return f.streamCount() >= 100 }, 30*time.Second, time.Millisecond)

	require.NoError(t, f.nats.Halt())
	failed := func() bool { return gatherSum(t, in.reg, "hearth_relay_failures_total") > 0 }
	require.Eventually(t, failed, 30*time.Second, 5*time.Millisecond, "a publish fails while NATS is down")
	require.NoError(t, f.nats.Resume(context.Background()))

	w.wait(t)
	f.requireAllRelayed(t)
}

// JetStream may refuse a message and store a later one: here a stream
// that takes one message per subject and refuses more (DiscardNew per
// subject) refuses order B's creation, as its subject already holds A's,
// and would take B's status change, the only message of its subject. The
// relay holds that change back until B's creation is stored, so that once
// the operator lifts the limit, the stream holds B's events in order.
func TestRelayHoldsAnAggregateBehindARefusedMessage(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	limited := nats.StreamConfig{Name: stream, Subjects: []string{"hearth.>"}, Storage: nats.FileStorage,
		Discard: nats.DiscardNew, DiscardNewPerSubject: true, MaxMsgsPerSubject: 1, Duplicates: 10 * time.Minute}
	_, err := f.js.AddStream(&limited)
	require.NoError(t, err)
	ctx := context.Background()
	var b string
	for range 2 { // A, then B
		wr, err := f.OrderCmds.Create(ctx, command.CreateOrder{Meta: f.Meta(), CustomerID: f.CustomerID, AmountCents: 500})
		require.NoError(t, err)
		b = wr.Stream[0].StreamID
	}
	_, err = f.Update(ctx, b, nil, func(o *order.Order) error { return o.ChangeStatus(order.StatusConfirmed, time.Now()) })
	require.NoError(t, err)

	in := f.startInstance(t, "a", f.config())
	require.Eventually(t, func() bool { return gatherSum(t, in.reg, "hearth_relay_failures_total") >= 3 }, 30*time.Second, 5*time.Millisecond,
		"B's creation is refused, again and again")
	msgs := f.messages(t)
	require.Len(t, msgs, 1, "A's creation only: B's change waits for B's creation")

	limited.DiscardNewPerSubject, limited.MaxMsgsPerSubject = false, -1
	_, err = f.js.UpdateStream(&limited)
	require.NoError(t, err)
	f.requireAllRelayed(t)
}
