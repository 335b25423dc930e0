package projector_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/projector"
	"hearth/adapters/readmodel"
	"hearth/app/ops"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/internal/pgtest"
	"hearth/internal/refdata"
)

// breakable is the orders projection with a switch: while broken names a
// stream (or an event id), its events fail, deterministically.
type breakable struct {
	f      fixture
	broken atomic.Value // string: a stream id or an event id
}

func (b *breakable) projection() projector.Projection {
	return projector.Projection{Name: "orders", Topic: pubsub.TopicOrders, Decode: order.Decode,
		Apply: func(ctx context.Context, r event.Recorded) error {
			if id, _ := b.broken.Load().(string); id != "" && (id == r.StreamID || id == r.ID || id == versionKey(r.StreamID, r.Version)) &&
				r.Type != event.SkippedType {
				return errors.New("injected: this order's events cannot be applied")
			}
			return b.f.Orders.Apply(ctx, r)
		}}
}

func (b *breakable) set(id string) { b.broken.Store(id) }

// versionKey names one version of a stream for set, before its event
// exists (so that no race lets it through first).
func versionKey(streamID string, version int) string { return streamID + "#" + strconv.Itoa(version) }

func (f fixture) step(t *testing.T, id string, st order.Status) {
	t.Helper()
	_, err := f.Update(context.Background(), id, nil, func(o *order.Order) error { return o.ChangeStatus(st, time.Now()) })
	require.NoError(t, err)
}

func (f fixture) rowVersion(t require.TestingT, id string) int {
	o, err := f.Orders.Get(context.Background(), query.Scope{MerchantID: f.MerchantID}, id)
	if err != nil {
		return 0
	}
	return o.Version
}

func (f fixture) verify(t *testing.T) []ops.Difference {
	t.Helper()
	log, err := pubsub.NewEventLog(f.ES)
	require.NoError(t, err)
	report, err := readmodel.Verify(context.Background(), readmodel.VerifyConfig{Log: log, DB: f.RM})
	require.NoError(t, err)
	return report.Differences()
}

// operator is the operator's use cases on parking, wired as serve wires
// them (the audit log in the event store, written in the replay's or
// skip's transaction).
func (f fixture) operator(t *testing.T, parking *projector.Parking) *ops.Operator {
	t.Helper()
	log, err := pubsub.NewEventLog(f.ES)
	require.NoError(t, err)
	m, err := readmodel.NewMaintenance(log, nil, f.RM)
	require.NoError(t, err)
	ref, err := refdata.New(f.ES)
	require.NoError(t, err)
	parking.Audit = refdata.WriteAudit
	op, err := ops.NewOperator(ops.Config{Parking: parking, Rebuilds: m, Verifier: m, Audit: ref})
	require.NoError(t, err)
	return op
}

// Guarantee 6, as the issue checks it: one order's events fail
// deterministically; that order parks and its later events wait, while
// other orders keep updating; once the cause is removed, replay applies
// every waiting event in order, and verification finds no difference.
//
// Not parallel: the failing handler retries inside its subscriber's
// transaction, which holds back pg_snapshot_xmin for the whole cluster.
func TestParkingHoldsOneAggregateAndReplayRestoresIt(t *testing.T) {
	for name, newDB := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			f := setup(t, newDB(t))
			b := &breakable{f: f}
			parking, err := projector.NewParking(f.ES, b.projection())
			require.NoError(t, err)
			op := f.operator(t, parking)
			f.RunRouterWith(t, parking, b.projection())
			ctx := context.Background()

			bad, good := f.CreateOrder(t), f.CreateOrder(t)
			require.Eventually(t, func() bool { return f.rowVersion(t, bad) == 1 && f.rowVersion(t, good) == 1 },
				10*time.Second, 10*time.Millisecond)

			b.set(bad)
			f.step(t, bad, order.StatusConfirmed) // v2 fails: bad parks
			var parked []ops.ParkedAggregate
			require.Eventually(t, func() bool {
				parked, err = parking.List(ctx, "")
				return err == nil && len(parked) == 1
			}, 20*time.Second, 10*time.Millisecond)
			require.Equal(t, bad, parked[0].StreamID)
			require.Equal(t, 2, parked[0].FirstVersion)
			require.Equal(t, f.Stream(t, bad)[1].ID, parked[0].FirstEventID)
			require.Contains(t, parked[0].Reason, "injected")
			// The park commits first, then the poison middleware publishes its copy.
			require.Eventually(t, func() bool { return f.Count(t, f.ES, "watermill_poison") == 1 },
				10*time.Second, 10*time.Millisecond, "the failed event is also on the poison topic")

			// Later events of bad wait; good keeps flowing.
			f.step(t, bad, order.StatusDispatching) // v3
			f.step(t, bad, order.StatusInService)   // v4
			f.step(t, good, order.StatusConfirmed)
			f.step(t, good, order.StatusDispatching)
			require.Eventually(t, func() bool { return f.rowVersion(t, good) == 3 }, 10*time.Second, 10*time.Millisecond)
			require.Eventually(t, func() bool {
				a, err := parking.Get(ctx, "orders", bad)
				return err == nil && a.Waiting == 3
			}, 10*time.Second, 10*time.Millisecond, "v2, v3 and v4 wait")
			require.Equal(t, 1, f.rowVersion(t, bad), "bad's row never skips an event")
			detail, err := parking.Get(ctx, "orders", bad)
			require.NoError(t, err)
			require.Equal(t, []int{2, 3, 4}, []int{detail.Events[0].Version, detail.Events[1].Version, detail.Events[2].Version})
			_, isParked, err := parking.Parked(ctx, "orders", f.MerchantID, bad)
			require.NoError(t, err)
			require.True(t, isParked)
			_, isParked, err = parking.Parked(ctx, "orders", "00000000-0000-0000-0000-000000000000", bad)
			require.NoError(t, err)
			require.False(t, isParked, "another merchant does not see it")

			// Verification reports the parked row as behind.
			require.NotEmpty(t, f.verify(t))

			// Replay while the cause is still there: still parked, nothing lost.
			res, err := op.Replay(ctx, "orders", bad, "ops:ada")
			require.NoError(t, err)
			require.False(t, res.Unparked)
			require.Equal(t, 3, res.Waiting)
			require.Contains(t, res.Error, "injected")

			// The cause is removed: replay applies v2, v3, v4 in order.
			b.set("")
			res, err = op.Replay(ctx, "orders", bad, "ops:ada")
			require.NoError(t, err)
			require.Equal(t, ops.ReplayResult{Projection: "orders", StreamID: bad, Applied: 3, Unparked: true}, res)
			f.requireProjected(t, []string{bad, good})
			parked, err = parking.List(ctx, "")
			require.NoError(t, err)
			require.Empty(t, parked)

			// The aggregate flows again.
			f.step(t, bad, order.StatusCompleted)
			require.Eventually(t, func() bool { return f.rowVersion(t, bad) == 5 }, 10*time.Second, 10*time.Millisecond)
			f.requireProjected(t, []string{bad, good})
			require.Empty(t, f.verify(t))
		})
	}
}

// An aggregate parked before this process's router started (by the
// previous leader) holds its later events back from the first one: the
// handler skips its per-event parking check only once it has read that no
// aggregate of the projection is parked.
func TestParkedByAnEarlierTermHoldsEvents(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	b := &breakable{f: f}
	parked, free := f.CreateOrder(t), f.CreateOrder(t)
	first := f.Stream(t, parked)[0]
	_, err := f.ES.DB.Exec(`INSERT INTO parked_aggregates (projection, stream_id, stream_type, merchant_id, reason, first_event_id, first_version)
		VALUES ('orders', $1, 'order', $2, 'parked by the previous leader', $3, 1)`, parked, f.MerchantID, first.ID)
	require.NoError(t, err)
	parking, err := projector.NewParking(f.ES, b.projection())
	require.NoError(t, err)
	f.RunRouterWith(t, parking, b.projection())
	f.requireProjected(t, []string{free})
	require.Eventually(t, func() bool {
		a, err := parking.Get(context.Background(), "orders", parked)
		return err == nil && a.Waiting == 1
	}, 10*time.Second, 10*time.Millisecond, "its first event waits")
	require.Zero(t, f.rowVersion(t, parked))
}

// parkNewOrderAtVersion2 creates an order, waits for its first version in
// the read model, breaks its version 2 alone (the event, not the order),
// confirms the order and waits until parking holds it; it returns the
// order's id.
func parkNewOrderAtVersion2(t *testing.T, f fixture, b *breakable, parking *projector.Parking) string {
	t.Helper()
	id := f.CreateOrder(t)
	require.Eventually(t, func() bool { return f.rowVersion(t, id) == 1 }, 10*time.Second, 10*time.Millisecond)
	b.set(versionKey(id, 2))
	f.step(t, id, order.StatusConfirmed)
	require.Eventually(t, func() bool {
		_, ok, err := parking.Parked(context.Background(), "orders", f.MerchantID, id)
		return err == nil && ok
	}, 20*time.Second, 10*time.Millisecond)
	return id
}

// parkedAtVersion2 runs the orders projection with parking and parks a new
// order at its version 2, the only event that fails (the event itself, not
// the order), with version 3 waiting behind it.
func parkedAtVersion2(t *testing.T) (fixture, *projector.Parking, *ops.Operator, string) {
	f := setup(t, pgtest.NewDB(t))
	b := &breakable{f: f}
	parking, err := projector.NewParking(f.ES, b.projection())
	require.NoError(t, err)
	op := f.operator(t, parking)
	f.RunRouterWith(t, parking, b.projection())
	ctx := context.Background()

	id := parkNewOrderAtVersion2(t, f, b, parking)
	f.step(t, id, order.StatusDispatching)
	require.Eventually(t, func() bool {
		a, err := parking.Get(ctx, "orders", id)
		return err == nil && a.Waiting == 2
	}, 10*time.Second, 10*time.Millisecond)
	return f, parking, op, id
}

// Skipping records who and why, moves the row past the event with a
// "skipped" change-log row, and verification agrees.
func TestSkipRecordsWhoAndWhy(t *testing.T) {
	f, _, op, id := parkedAtVersion2(t)
	ctx := context.Background()
	v2 := f.Stream(t, id)[1].ID

	skip := ops.Skip{Projection: "orders", StreamID: id, EventID: v2, By: "ops:ada", Reason: "bad data"}
	noReason := skip
	noReason.Reason = " "
	_, err := op.Skip(ctx, noReason)
	require.Error(t, err, "a reason is required")
	notFirst := skip
	notFirst.EventID = f.Stream(t, id)[2].ID
	_, err = op.Skip(ctx, notFirst)
	require.Error(t, err, "only the first waiting event")
	res, err := op.Skip(ctx, skip)
	require.NoError(t, err)
	require.Equal(t, 2, res.Version)
	require.Equal(t, 1, res.Waiting)
	require.False(t, res.Unparked)
	var by, why string
	require.NoError(t, f.ES.DB.QueryRow(`SELECT skipped_by, reason FROM skipped_events WHERE event_id = $1`, v2).Scan(&by, &why))
	require.Equal(t, []string{"ops:ada", "bad data"}, []string{by, why})

	replayed, err := op.ReplayAll(ctx, "orders", "ops:ada")
	require.NoError(t, err)
	require.Len(t, replayed, 1)
	require.True(t, replayed[0].Unparked)

	got, err := f.Orders.Get(ctx, query.Scope{MerchantID: f.MerchantID}, id)
	require.NoError(t, err)
	require.Equal(t, 3, got.Version)
	require.Equal(t, "dispatching", got.Status)
	changes, err := f.Orders.Changes(ctx, query.Scope{MerchantID: f.MerchantID}, "order", id)
	require.NoError(t, err)
	require.Len(t, changes, 3)
	assert.Equal(t, event.SkippedType, changes[1].Action)
	require.Empty(t, f.verify(t))
}

// Two operators who each skip the event that failed, naming no event (the
// second skip waits for the first's lock), skip it once: the second finds
// behind it an event that was never tried, and is refused rather than skip
// that one too (a skipped event is skipped for good: in the read models,
// verify, rebuilds, the event feed and webhooks). Named with --event it
// can still be skipped untried.
//
// Not parallel: the failing handler retries inside its subscriber's
// transaction (see TestParkingHoldsOneAggregateAndReplayRestoresIt).
func TestTwoSkipsOfTheFailedEventSkipItOnce(t *testing.T) {
	f, parking, op, id := parkedAtVersion2(t)
	ctx := context.Background()

	res, err := op.Skip(ctx, ops.Skip{Projection: "orders", StreamID: id, By: "ops:ada", Reason: "bad data"})
	require.NoError(t, err)
	require.Equal(t, 2, res.Version)
	_, err = op.Skip(ctx, ops.Skip{Projection: "orders", StreamID: id, By: "ops:bob", Reason: "bad data"})
	var rule *apperr.RuleError
	require.ErrorAs(t, err, &rule, "the second skip, meant for version 2, finds version 3 untried")
	require.Equal(t, "parked.skip_untried", rule.Rule)
	a, err := parking.Get(ctx, "orders", id)
	require.NoError(t, err)
	require.Equal(t, 1, a.Waiting, "version 3 still waits")

	replayed, err := op.Replay(ctx, "orders", id, "ops:ada")
	require.NoError(t, err)
	require.True(t, replayed.Unparked)
	got, err := f.Orders.Get(ctx, query.Scope{MerchantID: f.MerchantID}, id)
	require.NoError(t, err)
	require.Equal(t, "dispatching", got.Status, "version 3 applied, not skipped")
	require.Empty(t, f.verify(t))
}

// Naming the untried event skips it: the operator said which.
//
// Not parallel: see TestTwoSkipsOfTheFailedEventSkipItOnce.
func TestSkipOfAnUntriedEventItNames(t *testing.T) {
	f, _, op, id := parkedAtVersion2(t)
	ctx := context.Background()

	_, err := op.Skip(ctx, ops.Skip{Projection: "orders", StreamID: id, By: "ops:ada", Reason: "bad data"})
	require.NoError(t, err)
	v3 := f.Stream(t, id)[2].ID
	res, err := op.Skip(ctx, ops.Skip{Projection: "orders", StreamID: id, EventID: v3, By: "ops:ada", Reason: "bad too"})
	require.NoError(t, err)
	require.Equal(t, 3, res.Version)
	require.True(t, res.Unparked)
}

// A parked aggregate's events that were applied before it parked, delivered
// again (a crash or a leadership change before the subscriber acked its
// batch; here the consumer group is rewound, the same redelivery), are not
// held as waiting: the operator sees the failed event first, and skips it
// by the id the list names.
//
// Not parallel: the failing handler retries inside its subscriber's
// transaction (see TestParkingHoldsOneAggregateAndReplayRestoresIt).
func TestRedeliveredAppliedEventsAreNotHeldAsWaiting(t *testing.T) {
	f := setup(t, pgtest.NewDB(t))
	b := &breakable{f: f}
	parking, err := projector.NewParking(f.ES, b.projection())
	require.NoError(t, err)
	op := f.operator(t, parking)
	f.RunRouterWith(t, parking, b.projection())
	ctx := context.Background()

	id := f.CreateOrder(t)
	f.step(t, id, order.StatusConfirmed) // v2
	require.Eventually(t, func() bool { return f.rowVersion(t, id) == 2 }, 10*time.Second, 10*time.Millisecond)
	b.set(versionKey(id, 3))
	f.step(t, id, order.StatusDispatching) // v3 fails: the order parks behind it
	v3 := f.Stream(t, id)[2].ID
	require.Eventually(t, func() bool {
		a, err := parking.Get(ctx, "orders", id)
		return err == nil && a.Waiting == 1
	}, 20*time.Second, 10*time.Millisecond)

	// Redelivery of everything (as after a crash before the batch's ack).
	_, err = f.ES.DB.Exec(`UPDATE watermill_offsets_orders SET offset_acked = 0, last_processed_transaction_id = '0'`)
	require.NoError(t, err)
	var maxOffset int64
	require.NoError(t, f.ES.DB.QueryRow(`SELECT max("offset") FROM watermill_orders`).Scan(&maxOffset))
	require.Eventually(t, func() bool {
		var off int64
		require.NoError(t, f.ES.DB.QueryRow(`SELECT offset_acked FROM watermill_offsets_orders WHERE consumer_group = 'orders'`).Scan(&off))
		return off == maxOffset
	}, 20*time.Second, 10*time.Millisecond, "everything delivered again")
	require.Equal(t, 2, f.rowVersion(t, id), "the row stays at v2")

	a, err := parking.Get(ctx, "orders", id)
	require.NoError(t, err)
	versions := []int{}
	for _, e := range a.Events {
		versions = append(versions, e.Version)
	}
	assert.Equal(t, []int{3}, versions, "only v3 waits: v1 and v2 were applied before the aggregate parked")

	// The operator skips the event that failed, as the list names it.
	_, err = op.Skip(ctx, ops.Skip{Projection: "orders", StreamID: id, EventID: v3, By: "ops:ada", Reason: "bad data"})
	require.NoError(t, err, "skipping the failed event (first_event_id) must work")
}

// An aggregate parked on a gap (the event that failed does not follow the
// row: its predecessor never reached the projection, as after a consumer
// group moved past messages retention pruned) is cleared by replay, the
// documented tool: the missing events are in the events table, the source
// of truth, and replay applies them first. Skip cannot help here (a
// skipped event is applied as a version bump, which the gap check refuses
// too), and a rebuild keeps each row at the version its change log
// records, so without this the aggregate stayed parked for good.
func TestReplayFillsAGapFromTheEventStore(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	parking, err := projector.NewParking(f.ES, projector.Projection{Name: "orders", Topic: pubsub.TopicOrders,
		Decode: order.Decode, Apply: f.Orders.Apply})
	require.NoError(t, err)
	op := f.operator(t, parking)
	ctx := context.Background()

	id := f.CreateOrder(t)
	f.step(t, id, order.StatusConfirmed)   // v2: never delivered
	f.step(t, id, order.StatusDispatching) // v3: meets the gap and parks
	stream := f.Stream(t, id)
	require.NoError(t, f.Orders.Apply(ctx, stream[0]))
	gap := f.Orders.Apply(ctx, stream[2])
	var gapErr *readmodel.GapError
	require.ErrorAs(t, gap, &gapErr)
	env, err := json.Marshal(stream[2].Envelope)
	require.NoError(t, err)
	// What the park middleware writes once v3's retry budget is spent.
	_, err = f.ES.DB.Exec(`INSERT INTO parked_aggregates (projection, stream_id, stream_type, merchant_id, reason, first_event_id, first_version)
		VALUES ('orders', $1, 'order', $2, $3, $4, 3)`, id, f.MerchantID, gap.Error(), stream[2].ID)
	require.NoError(t, err)
	_, err = f.ES.DB.Exec(`INSERT INTO parked_events (projection, stream_id, version, event_id, type, envelope)
		VALUES ('orders', $1, 3, $2, $3, $4)`, id, stream[2].ID, stream[2].Type, string(env))
	require.NoError(t, err)

	res, err := op.Replay(ctx, "orders", id, "ops:ada")
	require.NoError(t, err)
	require.Empty(t, res.Error)
	require.True(t, res.Unparked, "replay fills the gap and unparks")
	require.Equal(t, 3, f.rowVersion(t, id))
	f.requireProjected(t, []string{id})
	changes, err := f.Orders.Changes(ctx, query.Scope{MerchantID: f.MerchantID}, "order", id)
	require.NoError(t, err)
	require.Len(t, changes, 3, "one change-log row per event, the filled one too")
	require.Empty(t, f.verify(t))
}

// cutOffSkip is parking for the orders projection of b whose skip loses
// its event-store connection right after the read model committed the
// skipped event: the skip's transaction (the one holding the parked row,
// idle in it while the projection applies) is ended by
// pg_terminate_backend, as a crash or a lost connection ends it.
func cutOffSkip(t *testing.T, f fixture, b *breakable) (*projector.Parking, *ops.Operator, *atomic.Int32) {
	t.Helper()
	var cut atomic.Int32
	p := b.projection()
	apply := p.Apply
	p.Apply = func(ctx context.Context, r event.Recorded) error {
		if err := apply(ctx, r); err != nil || r.Type != event.SkippedType || cut.Load() > 0 {
			return err
		}
		var n int
		err := f.ES.DB.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(a.pid)) FROM pg_stat_activity a
			WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.state LIKE 'idle in transaction%'
			AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.granted
			            AND l.locktype = 'relation' AND l.relation = 'parked_aggregates'::regclass)`).Scan(&n)
		require.NoError(t, err)
		require.Equal(t, 1, n, "the skip's transaction is idle in it, holding the parked row")
		cut.Add(1)
		return nil
	}
	parking, err := projector.NewParking(f.ES, p)
	require.NoError(t, err)
	return parking, f.operator(t, parking), &cut
}

// A skip cut off after the read model applied the skipped event (the
// process killed, its event-store connection lost) is finished by running
// it again, or by a replay once the cause is fixed (docs/operations.md:
// "Replaying is always safe"): the event ends up skipped everywhere,
// recorded in skipped_events with who and why (which verify, rebuild, the
// event feed and the relay go by), never skipped in the read model alone.
//
// Not parallel: see TestTwoSkipsOfTheFailedEventSkipItOnce.
func TestASkipCutOffAfterTheReadModelAppliedItIsFinishedByARerun(t *testing.T) {
	for _, rerun := range []string{"skip", "replay"} {
		t.Run(rerun, func(t *testing.T) {
			f := setup(t, pgtest.NewDB(t))
			b := &breakable{f: f}
			live, err := projector.NewParking(f.ES, b.projection())
			require.NoError(t, err)
			f.RunRouterWith(t, live, b.projection())
			ctx := context.Background()
			id := parkNewOrderAtVersion2(t, f, b, live)
			v2 := f.Stream(t, id)[1].ID

			parking, op, cut := cutOffSkip(t, f, b)
			_, err = op.Skip(ctx, ops.Skip{Projection: "orders", StreamID: id, EventID: v2, By: "ops:ada", Reason: "bad data"})
			require.Error(t, err, "the skip lost its connection before its commit")
			require.Equal(t, int32(1), cut.Load())
			_, ok, err := parking.Parked(ctx, "orders", f.MerchantID, id)
			require.NoError(t, err)
			require.True(t, ok, "still parked: the skip did not commit")

			switch rerun {
			case "skip":
				res, err := op.Skip(ctx, ops.Skip{Projection: "orders", StreamID: id, EventID: v2, By: "ops:ada", Reason: "bad data"})
				require.NoError(t, err)
				require.True(t, res.Unparked)
			case "replay":
				// As the runbook has it: the cause fixed, replay.
				b.set("")
				res, err := op.Replay(ctx, "orders", id, "ops:ada")
				require.NoError(t, err)
				require.True(t, res.Unparked, "replay: %s", res.Error)
			}
			var by, why string
			require.NoError(t, f.ES.DB.QueryRow(`SELECT skipped_by, reason FROM skipped_events WHERE event_id = $1`, v2).Scan(&by, &why),
				"the event the read model shows skipped is recorded as skipped")
			require.Equal(t, []string{"ops:ada", "bad data"}, []string{by, why})
			require.Empty(t, f.verify(t), "verify, which folds the events skipped_events names as skipped, agrees with the read model")
		})
	}
}
