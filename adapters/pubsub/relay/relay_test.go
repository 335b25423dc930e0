package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/internal/pubsubtest"
	"hearth/adapters/pubsub/projector"
	"hearth/adapters/pubsub/relay"
	"hearth/adapters/readmodel"
	"hearth/app/command"
	"hearth/app/publicevent"
	"hearth/domain/order"
	"hearth/domain/servicerequest"
	"hearth/internal/advisory"
	"hearth/internal/natsserver"
	"hearth/internal/natstest"
	"hearth/internal/pgtest"
	"hearth/leader"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const stream = "HEARTH_TEST"

// fixture is one merchant on fresh databases, a NATS server, and the
// relay's progress store.
type fixture struct {
	pubsubtest.Fixture
	urls     pgtest.URLs
	nats     *natsserver.Server
	offsets  *readmodel.RelayOffsets
	requests command.ServiceRequestHandlers
	js       nats.JetStreamContext
}

func setup(t testing.TB, urls pgtest.URLs) *fixture {
	t.Helper()
	f := &fixture{Fixture: pubsubtest.Setup(t, urls), urls: urls, nats: natstest.Start(t)}
	var err error
	f.offsets, err = readmodel.NewRelayOffsets(f.RM)
	require.NoError(t, err)
	f.requests, err = command.NewServiceRequestHandlers(f.Tx)
	require.NoError(t, err)
	nc, err := nats.Connect(f.nats.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	f.js, err = nc.JetStream()
	require.NoError(t, err)
	return f
}

var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

func (f *fixture) config() relay.Config {
	return relay.Config{
		EventStore: f.urls.EventStore, Offsets: f.offsets, Lock: advisory.Relay, Lease: 3 * time.Second,
		NATSURL: f.nats.URL(), Stream: stream, SubjectPrefix: "hearth", DuplicateWindow: 10 * time.Minute,
		Fallback: 50 * time.Millisecond, PageSize: 10, Log: quiet,
	}
}

// instance is one relay led by its own Elector, as a Hearth process runs it.
type instance struct {
	elector *leader.Elector
	reg     *prometheus.Registry // its metrics
	cancel  context.CancelFunc
	done    chan struct{}
}

func (f *fixture) startInstance(t *testing.T, holder string, cfg relay.Config) *instance {
	t.Helper()
	e, err := leader.New(leader.Config{ConnString: f.urls.EventStore, TermDB: f.RM.DB, Name: advisory.Relay,
		FenceAppName: relay.ApplicationName, Holder: holder, Log: quiet})
	require.NoError(t, err)
	cfg.Lease = e.Lease()
	in := &instance{elector: e, reg: prometheus.NewRegistry(), done: make(chan struct{})}
	if cfg.Metrics == nil {
		cfg.Metrics, err = relay.NewMetrics(in.reg)
		require.NoError(t, err)
	}
	r, err := relay.New(cfg)
	require.NoError(t, err)
	var ctx context.Context
	ctx, in.cancel = context.WithCancel(context.Background())
	go func() {
		defer close(in.done)
		_ = e.Run(ctx, r.Run)
	}()
	t.Cleanup(in.stop)
	return in
}

func (in *instance) stop() {
	in.cancel()
	<-in.done
}

func (in *instance) leads() bool { return in.elector.Status().Role == leader.RoleLeader }

// writer writes n aggregates, orders (each created, then moved through
// three statuses) and service requests.
type writer struct {
	f    *fixture
	err  error
	done chan struct{}
}

func (f *fixture) write(n int) *writer {
	w := &writer{f: f, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; i < n; i++ {
			if w.err = w.one(i); w.err != nil {
				return
			}
		}
	}()
	return w
}

func (w *writer) one(i int) error {
	ctx := context.Background()
	f := w.f
	if i%5 == 4 {
		_, err := f.requests.Create(ctx, command.CreateServiceRequest{Meta: f.Meta(), CustomerID: f.CustomerID, Source: "phone",
			Details: servicerequest.Details{Content: fmt.Sprintf("request %d", i)}})
		return err
	}
	wr, err := f.OrderCmds.Create(ctx, command.CreateOrder{Meta: f.Meta(), CustomerID: f.CustomerID, AmountCents: 500})
	if err != nil {
		return err
	}
	id := wr.Stream[0].StreamID
	for _, st := range []order.Status{order.StatusConfirmed, order.StatusInService, order.StatusCompleted} {
		if _, err := f.Update(ctx, id, nil, func(o *order.Order) error { return o.ChangeStatus(st, time.Now()) }); err != nil {
			return err
		}
	}
	return nil
}

func (w *writer) wait(t *testing.T) {
	t.Helper()
	<-w.done
	require.NoError(t, w.err)
}

// relayed is one message of the stream.
type relayed struct {
	seq      uint64
	subject  string
	msgID    string
	streamID string
	version  int
	data     []byte
}

// messages reads the whole stream, in stream order.
func (f *fixture) messages(t *testing.T) []relayed {
	t.Helper()
	info, err := f.js.StreamInfo(stream)
	require.NoError(t, err)
	var out []relayed
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := f.js.GetMsg(stream, seq)
		require.NoError(t, err)
		var v int
		_, err = fmt.Sscan(m.Header.Get("aggregate_version"), &v)
		require.NoError(t, err)
		out = append(out, relayed{seq: m.Sequence, subject: m.Subject, msgID: m.Header.Get(nats.MsgIdHdr),
			streamID: m.Header.Get("aggregate_id"), version: v, data: m.Data})
	}
	return out
}

// storedEvents returns the event ids of the store.
func (f *fixture) storedEvents(t testing.TB) map[string]bool {
	t.Helper()
	rows, err := f.ES.DB.Query(`SELECT event_id FROM events`)
	require.NoError(t, err)
	defer rows.Close()
	ids := map[string]bool{}
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids[id] = true
	}
	require.NoError(t, rows.Err())
	return ids
}

// positions returns the store position of every event, by event id.
func (f *fixture) positions(t *testing.T) map[string]int64 {
	t.Helper()
	rows, err := f.ES.DB.Query(`SELECT event_id, position FROM events`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var p int64
		require.NoError(t, rows.Scan(&id, &p))
		out[id] = p
	}
	require.NoError(t, rows.Err())
	return out
}

// streamCount is the number of messages in the stream (0 before it exists).
func (f *fixture) streamCount() int {
	info, err := f.js.StreamInfo(stream)
	if err != nil {
		return 0
	}
	return int(info.State.Msgs)
}

// requireAllRelayed waits until the stream holds as many messages as the
// store holds events, then checks that it holds each event exactly once and
// each aggregate's events in version order, with nothing missing.
func (f *fixture) requireAllRelayed(t *testing.T) []relayed {
	t.Helper()
	want := f.storedEvents(t)
	require.NotEmpty(t, want)
	require.Eventually(t, func() bool { return f.streamCount() >= len(want) }, 60*time.Second, 20*time.Millisecond,
		"the stream should reach %d messages", len(want))
	msgs := f.messages(t)
	require.Len(t, msgs, len(want), "each event exactly once")
	last := map[string]int{}
	for _, m := range msgs {
		require.True(t, want[m.msgID], "message %d (%s) is a stored event", m.seq, m.msgID)
		delete(want, m.msgID)
		require.Equal(t, last[m.streamID]+1, m.version, "stream %s: version %d follows %d (seq %d)", m.streamID, m.version, last[m.streamID], m.seq)
		last[m.streamID] = m.version
	}
	require.Empty(t, want, "every event relayed")
	return msgs
}

// Every event reaches the stream once, in order per aggregate, from the
// backlog and live, on the subject of its merchant and type, with the event
// id as Nats-Msg-Id; the position is recorded under the term and copied to
// the topics' offsets tables; the lag falls to zero.
func TestRelayPublishesEveryEventInOrder(t *testing.T) {
	t.Parallel()
	for name, newDB := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, newDB(t))
			f.write(10).wait(t) // a backlog

			reg := prometheus.NewRegistry()
			metrics, err := relay.NewMetrics(reg)
			require.NoError(t, err)
			lag := relay.NewLagCollector(f.ES.DB, f.offsets, []string{"orders", "service_requests", "schedules"}, quiet)
			require.NoError(t, reg.Register(lag))
			require.Equal(t, 8*4+2, int(gatherSum(t, reg, "hearth_relay_lag_events")), "the backlog is lag")

			cfg := f.config()
			cfg.Metrics = metrics
			in := f.startInstance(t, "a", cfg)
			f.write(10).wait(t) // live
			msgs := f.requireAllRelayed(t)

			types := map[string]int{}
			positions := f.positions(t)
			for _, m := range msgs {
				var pe publicevent.Event
				require.NoError(t, json.Unmarshal(m.data, &pe))
				require.Equal(t, m.msgID, pe.ID, "Nats-Msg-Id is the event id")
				require.Equal(t, "hearth."+f.MerchantID+"."+pe.Type, m.subject)
				require.Equal(t, positions[pe.ID], pe.Position, "the public form carries the store position")
				require.Equal(t, publicevent.SchemaVersion, pe.SchemaVersion)
				types[pe.Type]++
			}
			require.Equal(t, map[string]int{"order.created": 16, "order.status_changed": 48, "service_request.created": 4}, types)

			term := in.elector.Status().Term
			require.Eventually(t, func() bool { return gatherSum(t, reg, "hearth_relay_lag_events") == 0 }, 10*time.Second, 10*time.Millisecond)
			require.Equal(t, float64(len(msgs)), gatherSum(t, reg, "hearth_relay_published_total"))
			var terms, mirrored int
			require.NoError(t, f.RM.DB.QueryRow(`SELECT count(*) FILTER (WHERE term = $1), count(*) FROM relay_offsets`, term).Scan(&terms, new(int)))
			require.Equal(t, 2, terms, "orders and service_requests were recorded under the term")
			// The copy follows the save that the lag is computed from.
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				require.NoError(c, f.ES.DB.QueryRow(`SELECT count(*) FROM watermill_offsets_orders o
					JOIN (SELECT max("offset") AS last FROM watermill_orders) m ON o.offset_acked = m.last
					WHERE consumer_group = 'relay'`).Scan(&mirrored))
				assert.Equal(c, 1, mirrored, "the position is copied to the orders topic's offsets")
			}, 10*time.Second, 10*time.Millisecond)

			info, err := f.js.StreamInfo(stream)
			require.NoError(t, err)
			require.Equal(t, 10*time.Minute, info.Config.Duplicates, "the duplicate window is configured")
			require.Equal(t, []string{"hearth.>"}, info.Config.Subjects)
		})
	}
}

// A relay given the process's notifier opens no LISTEN connection of its
// own and is woken by that one: with a fallback poll too slow to matter,
// live events still reach the stream, and the database holds one notifier
// session, the shared one.
func TestRelaySharesTheProcessNotifier(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	cfg := f.config()
	cfg.Notifier = f.listen(t)
	cfg.Fallback = time.Hour
	in := f.startInstance(t, "a", cfg)
	require.Eventually(t, in.leads, 30*time.Second, 10*time.Millisecond)
	f.write(5).wait(t)
	f.requireAllRelayed(t)
	require.Equal(t, 1, f.listeners(t), "one LISTEN session: the process's")
}

// listen runs a notifier, as a process does for its parts, until the test
// ends, and returns it once it listens.
func (f *fixture) listen(t *testing.T) *projector.Notifier {
	t.Helper()
	notifier, err := projector.NewNotifier(f.urls.EventStore, quiet)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- notifier.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-ran) })
	require.Eventually(t, func() bool { return f.listeners(t) == 1 }, 30*time.Second, 10*time.Millisecond, "the notifier listens")
	return notifier
}

// listeners counts the LISTEN sessions on the event store.
func (f *fixture) listeners(t *testing.T) int {
	var n int
	require.NoError(t, f.ES.DB.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`,
		projector.NotifyApplicationName).Scan(&n))
	return n
}

// timers are the relay's waits between reads on a clock of the test's:
// a wait is over only when advance moves the clock past its end.
type timers struct {
	mu      sync.Mutex
	now     time.Duration
	next    int
	pending map[int]pendingWait
	stopped int // waits ended early (by a notification)
}

type pendingWait struct {
	end  time.Duration
	over chan time.Time
}

func (ts *timers) start(d time.Duration) (<-chan time.Time, func() bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	id := ts.next
	ts.next++
	w := pendingWait{end: ts.now + d, over: make(chan time.Time, 1)}
	ts.pending[id] = w
	return w.over, func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		_, was := ts.pending[id]
		if was {
			ts.stopped++
		}
		delete(ts.pending, id)
		return was
	}
}

// waiting is how many waits are running.
func (ts *timers) waiting() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.pending)
}

// interrupted is how many waits ended early.
func (ts *timers) interrupted() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.stopped
}

// advance moves the clock to the end of the first wait to end, ends every
// wait due then, and returns how far the clock moved.
func (ts *timers) advance() time.Duration {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	first := time.Duration(-1)
	for _, w := range ts.pending {
		if first < 0 || w.end < first {
			first = w.end
		}
	}
	moved := first - ts.now
	ts.now = first
	for id, w := range ts.pending {
		if w.end <= ts.now {
			w.over <- time.Time{}
			delete(ts.pending, id)
		}
	}
	return moved
}

// A message hidden from the relay by an older open transaction (reads see
// only below pg_snapshot_xmin, which is cluster-wide) is read again within
// a second, however long the transaction stays open and whatever the
// fallback (an hour here): whether its notification comes while the relay
// runs, or came before the relay started. On the test's clock, every wait
// the relay makes while the message is hidden, and the one after it shows,
// is at most a second. Not parallel: it holds pg_snapshot_xmin back.
func TestRelayRereadsAHiddenMessageWithinASecond(t *testing.T) {
	for name, before := range map[string]bool{"notified while running": false, "written before the start": true} {
		t.Run(name, func(t *testing.T) {
			f := setup(t, pgtest.NewDB(t))
			ctx := context.Background()
			clock := &timers{pending: map[int]pendingWait{}}
			cfg := f.config()
			cfg.Notifier, cfg.Fallback, cfg.Timer = f.listen(t), time.Hour, clock.start
			topics := len(relay.Topics())
			older, err := f.ES.DB.BeginTx(ctx, nil)
			require.NoError(t, err)
			defer func() { _ = older.Rollback() }()
			_, err = older.Exec(`SELECT pg_current_xact_id()`) // holds pg_snapshot_xmin below what follows
			require.NoError(t, err)
			create := func() {
				_, err := f.OrderCmds.Create(ctx, command.CreateOrder{Meta: f.Meta(), CustomerID: f.CustomerID, AmountCents: 500})
				require.NoError(t, err)
			}
			if before {
				create()
			}
			f.startInstance(t, "a", cfg)
			require.Eventually(t, func() bool { return clock.waiting() == topics }, 30*time.Second, time.Millisecond, "every topic read and waits")
			if !before {
				create()
				require.Eventually(t, func() bool { return clock.interrupted() == 1 }, 30*time.Second, time.Millisecond,
					"the notification wakes the relay's orders topic, which finds nothing visible")
			}
			// step lets the first wait end, once every topic waits, and
			// requires that it was at most a second.
			step := func() {
				require.Eventually(t, func() bool { return clock.waiting() == topics }, 30*time.Second, time.Millisecond, "every topic waits again")
				require.LessOrEqual(t, clock.advance(), time.Second, "a wait while a notified message is hidden")
			}
			for clock.now < 30*time.Second {
				step()
			}
			require.Zero(t, f.streamCount(), "hidden")
			require.NoError(t, older.Commit())
			for deadline := time.Now().Add(30 * time.Second); f.streamCount() == 0; {
				require.True(t, time.Now().Before(deadline), "relayed once visible")
				step()
			}
		})
	}
}

// Publishing again from an older position (a crash before the save, a
// takeover) adds nothing: JetStream drops the messages by Nats-Msg-Id.
func TestRelayDuplicatesAreDroppedByJetStream(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	f.write(10).wait(t)
	in := f.startInstance(t, "a", f.config())
	before := len(f.requireAllRelayed(t))
	in.stop()

	_, err := f.RM.DB.Exec(`UPDATE relay_offsets SET transaction_id = 0, "offset" = 0`)
	require.NoError(t, err)
	in = f.startInstance(t, "a", f.config())
	require.Eventually(t, func() bool {
		var behind bool
		require.NoError(t, f.RM.DB.QueryRow(`SELECT bool_or("offset" = 0) FROM relay_offsets`).Scan(&behind))
		return !behind
	}, 30*time.Second, 10*time.Millisecond, "the relay publishes everything again")
	require.Len(t, f.requireAllRelayed(t), before)
	in.stop()
}

// The NATS server stops mid-stream and comes back on the same port and
// store: the relay waits, then carries on, and nothing is lost, doubled or
// reordered.
func TestRelaySurvivesNATSRestart(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	f.startInstance(t, "a", f.config())
	w := f.write(60)
	require.Eventually(t, func() bool { return f.streamCount() >= 20 }, 30*time.Second, 10*time.Millisecond)

	require.NoError(t, f.nats.Halt())
	f.write(10).wait(t) // events written while NATS is down, whatever the first writer's pace
	require.NoError(t, f.nats.Resume(context.Background()))

	w.wait(t)
	f.requireAllRelayed(t)
}

// The leader goes away mid-burst, by losing its lock (its session ended, as
// when its connection drops), by stopping, or by stopping while NATS is
// down and it is retrying a page; the standby takes over from the recorded
// position, and the stream still holds every event once, in order per
// aggregate.
func TestRelayLeadershipChangeMidBurst(t *testing.T) {
	t.Parallel()
	for name, leave := range map[string]func(t *testing.T, f *fixture, leader *instance){
		"lock_lost": func(t *testing.T, f *fixture, _ *instance) { f.endLockSession(t) },
		"stopped":   func(_ *testing.T, _ *fixture, leader *instance) { leader.stop() },
		"stopped_while_nats_down": func(t *testing.T, f *fixture, leader *instance) {
			require.NoError(t, f.nats.Halt())
			f.write(3).wait(t) // something to publish while NATS is down
			failed := func() bool { return gatherSum(t, leader.reg, "hearth_relay_failures_total") > 0 }
			require.Eventually(t, failed, 30*time.Second, 5*time.Millisecond, "the leader fails to publish a page")
			leader.stop()
			require.NoError(t, f.nats.Resume(context.Background()))
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, pgtest.NewDB(t))
			a := f.startInstance(t, "a", f.config())
			require.Eventually(t, a.leads, 10*time.Second, 5*time.Millisecond)
			b := f.startInstance(t, "b", f.config())
			w := f.write(60)
			require.Eventually(t, func() bool { return f.streamCount() >= 30 }, 30*time.Second, 5*time.Millisecond)

			firstTerm := a.elector.Status().Term
			burst := f.write(30) // writing on through the change, whatever the first writer's pace
			leave(t, f, a)
			require.Eventually(t, b.leads, 15*time.Second, 5*time.Millisecond, "the standby takes over")

			w.wait(t)
			burst.wait(t)
			f.requireAllRelayed(t)
			require.Eventually(t, func() bool {
				var term int64
				require.NoError(t, f.RM.DB.QueryRow(`SELECT max(term) FROM relay_offsets`).Scan(&term))
				return term > firstTerm
			}, 10*time.Second, 10*time.Millisecond, "the new term records the position")
		})
	}
}

// endLockSession ends the database session that holds the relay's lock, as
// a dropped connection would.
func (f *fixture) endLockSession(t *testing.T) {
	t.Helper()
	key := uint64(advisory.Key(advisory.Relay))
	var ended bool
	require.NoError(t, f.ES.DB.QueryRow(`SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND classid::bigint = $1 AND objid::bigint = $2
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
		int64(key>>32), int64(uint32(key))).Scan(&ended))
	require.True(t, ended)
}

// A relay whose term is over cannot move the position: its save fails with
// ErrStaleTerm, Run returns it, and the position stays where the term left
// it.
func TestRelayStaleTermCannotMovePosition(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	_, err := f.RM.DB.Exec(`INSERT INTO projection_leader (name, term, holder, since) VALUES ($1, 1, 'test', now())`, advisory.Relay)
	require.NoError(t, err)
	r, err := relay.New(f.config())
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background(), 1) }()

	f.write(5).wait(t)
	f.requireAllRelayed(t)
	position := func() (tx, off int64) {
		// No row yet reads as the zero position.
		_ = f.RM.DB.QueryRow(`SELECT transaction_id, "offset" FROM relay_offsets WHERE topic = 'orders'`).Scan(&tx, &off)
		return tx, off
	}
	var last int64
	require.NoError(t, f.ES.DB.QueryRow(`SELECT max("offset") FROM watermill_orders`).Scan(&last))
	require.Eventually(t, func() bool { _, off := position(); return off == last }, 10*time.Second, 10*time.Millisecond,
		"the term records its last page")
	tx, off := position()

	_, err = f.RM.DB.Exec(`UPDATE projection_leader SET term = 2 WHERE name = $1`, advisory.Relay)
	require.NoError(t, err)
	f.write(1).wait(t)
	select {
	case err := <-done:
		require.ErrorIs(t, err, readmodel.ErrStaleTerm)
	case <-time.After(30 * time.Second):
		t.Fatal("the relay went on after its term ended")
	}
	tx2, off2 := position()
	require.Equal(t, [2]int64{tx, off}, [2]int64{tx2, off2}, "the stale term moved nothing")

	// Outside any term, the store refuses to write at all.
	require.Error(t, f.offsets.Save(context.Background(), "orders", readmodel.RelayPosition{Offset: 1}, readmodel.RelayTarget{Stream: "HEARTH", SubjectPrefix: "hearth"}))
}

// gatherSum adds up every series of the metric name.
func gatherSum(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return sum
}

// An existing stream keeps the operator's settings but gets the configured
// duplicate window; one that does not take the relay's subjects is not
// published to (the set-up is retried and counted) until it does.
func TestRelayAdoptsAnExistingStream(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	_, err := f.js.AddStream(&nats.StreamConfig{Name: stream, Subjects: []string{"other.>"}, Storage: nats.FileStorage,
		MaxAge: time.Hour, Duplicates: time.Minute})
	require.NoError(t, err)
	f.write(2).wait(t)
	in := f.startInstance(t, "a", f.config())
	require.Eventually(t, func() bool { return gatherSum(t, in.reg, "hearth_relay_failures_total") > 0 }, 30*time.Second, 5*time.Millisecond,
		"a stream without the relay's subjects is refused")
	require.Zero(t, f.streamCount())

	_, err = f.js.UpdateStream(&nats.StreamConfig{Name: stream, Subjects: []string{"other.>", "hearth.*.*.*"}, Storage: nats.FileStorage,
		MaxAge: time.Hour, Duplicates: time.Minute})
	require.NoError(t, err)
	f.requireAllRelayed(t)
	info, err := f.js.StreamInfo(stream)
	require.NoError(t, err)
	require.Equal(t, 10*time.Minute, info.Config.Duplicates, "the duplicate window is the relay's")
	require.Equal(t, time.Hour, info.Config.MaxAge, "the operator's limit stays")
	require.Equal(t, []string{"other.>", "hearth.*.*.*"}, info.Config.Subjects)
}

// lastOrdersMessage is the position of the orders topic's last message.
func (f *fixture) lastOrdersMessage(t *testing.T) pubsub.Position {
	t.Helper()
	var tx string
	var p pubsub.Position
	// m.: a bare transaction_id would order by the text output column.
	require.NoError(t, f.ES.DB.QueryRow(`SELECT m.transaction_id::text, m."offset" FROM watermill_orders m
		ORDER BY m.transaction_id DESC, m."offset" DESC LIMIT 1`).Scan(&tx, &p.Offset))
	var err error
	p.TransactionID, err = strconv.ParseUint(tx, 10, 64)
	require.NoError(t, err)
	return p
}

// pruneOrders makes every message of the orders topic old, has the
// projections' group acknowledge them all, and runs retention on a worker
// that knows only that group; it returns how many messages went.
func (f *fixture) pruneOrders(t *testing.T) int {
	t.Helper()
	_, err := f.ES.DB.Exec(`UPDATE watermill_orders SET created_at = created_at - interval '8 days'`)
	require.NoError(t, err)
	last := f.lastOrdersMessage(t)
	_, err = f.ES.DB.Exec(`INSERT INTO watermill_offsets_orders (consumer_group, offset_acked, last_processed_transaction_id)
		VALUES ('orders', $1, $2::text::xid8) ON CONFLICT (consumer_group) DO UPDATE
		SET offset_acked = excluded.offset_acked, last_processed_transaction_id = excluded.last_processed_transaction_id`,
		last.Offset, strconv.FormatUint(last.TransactionID, 10))
	require.NoError(t, err)
	r, err := pubsub.NewRetention(pubsub.RetentionConfig{DB: f.ES.DB, Keep: 7 * 24 * time.Hour, Batch: 100, Log: quiet,
		Topics: []pubsub.RetainedTopic{{Topic: pubsub.TopicOrders, Groups: []string{"orders"}}}})
	require.NoError(t, err)
	n, err := r.PruneAll(context.Background())
	require.NoError(t, err)
	return n
}

// The relay writes its position into every topic's offsets table as it
// starts, before it has published anything, so that retention on any
// worker, whatever its settings, keeps what the relay has not published.
func TestRelayHoldsRetentionFromItsStart(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	in := f.startInstance(t, "a", f.config())
	require.Eventually(t, func() bool {
		for _, topic := range relay.Topics() {
			var n int
			require.NoError(t, f.ES.DB.QueryRow(`SELECT count(*) FROM `+pubsub.Offsets.MessagesOffsetsTable(topic)+` WHERE consumer_group = $1`,
				relay.ConsumerGroup).Scan(&n))
			if n == 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "the relay's group is in every topic's offsets table")
	in.stop()

	f.write(4).wait(t)
	require.Zero(t, f.pruneOrders(t), "the relay has published none of them")
	f.startInstance(t, "a", f.config())
	f.requireAllRelayed(t)
}

// A relay that meets a gap (messages pruned before it published them: it
// started after retention had deleted them, or its group's row was
// deleted while still needed) ends its term with a *pubsub.TopicGapError
// naming the topic, its group and the range, and publishes nothing after
// it. Once its position is moved past the gap (docs/operations.md), it
// relays what follows.
func TestRelayStopsAtAGap(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	f.write(4).wait(t) // four orders
	through := f.lastOrdersMessage(t)
	require.Equal(t, 16, f.pruneOrders(t))
	f.write(1).wait(t) // one more

	r, err := relay.New(f.config())
	require.NoError(t, err)
	err = r.Run(context.Background(), 1)
	var gap *pubsub.TopicGapError
	require.ErrorAs(t, err, &gap)
	require.Equal(t, &pubsub.TopicGapError{Topic: pubsub.TopicOrders, Group: relay.ConsumerGroup, Through: through}, gap)
	require.Zero(t, f.streamCount(), "nothing published after the gap")

	_, err = f.RM.DB.Exec(`INSERT INTO relay_offsets (topic, transaction_id, "offset", term, relayed_at) VALUES ('orders', $1, $2, 0, now())`,
		int64(through.TransactionID), through.Offset)
	require.NoError(t, err)
	f.startInstance(t, "a", f.config())
	require.Eventually(t, func() bool { return f.streamCount() == 4 }, 30*time.Second, 10*time.Millisecond, "the order written after the gap")
}
