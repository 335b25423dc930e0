package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"hearth/app/publicevent"
	"hearth/internal/aggregates"
	"hearth/internal/database"
	"hearth/internal/harness"
	"hearth/internal/natstest"
	"hearth/internal/patroni"
	"hearth/internal/pgtest"
	"hearth/migrations"
)

// haFaults are the database faults TestChaosHA injects, in turn: the
// primary's machine lost (Patroni and Postgres killed), a planned
// switchover, the primary's machine frozen (every process of it stopped)
// until Patroni has replaced it, then resumed, and one etcd member lost.
var haFaults = []string{"kill", "switchover", "freeze", "etcd"}

// TestChaosHA runs Hearth (an api process and two workers, webhook
// delivery to a receiver and the relay to JetStream on) on a Patroni
// cluster of two Postgres nodes in synchronous mode and three etcd
// members, through the multi-host URL, with a writer issuing commands
// through the API; each round injects one fault (haFaults, in turn),
// waits until writes are acknowledged again and every projection applies
// new events, and puts the cluster back together (the killed node and the
// etcd member started again, the frozen node resumed). Per fault it
// measures the write outage (the longest wait between two acknowledged
// writes, from the last before the fault to the first after the new
// primary is in place) and the time from the end of the outage until every
// projection applies an event written after it. The end checks that no
// acknowledged write was lost, that every event was applied exactly once,
// that no aggregate's webhooks were delivered out of order and that every
// event reached JetStream.
func TestChaosHA(t *testing.T) {
	ctx := t.Context()
	cluster, err := patroni.Start(ctx, patroni.Options{Nodes: 2, Etcd: 3, Install: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cluster.Stop()) })
	urls := pgtest.URLs{EventStore: cluster.URL("events"), ReadModel: cluster.URL("readmodel")}
	for _, step := range []struct {
		name, url string
		set       migrations.Set
	}{{"events", urls.EventStore, migrations.EventStore}, {"readmodel", urls.ReadModel, migrations.ReadModel}} {
		require.NoError(t, database.CreateDatabase(ctx, cluster.URL("postgres"), step.name))
		_, err := migrations.Apply(ctx, pgtest.Open(t, step.url).DB, step.set)
		require.NoError(t, err)
	}
	jetstream := natstest.Start(t)
	hooks := newHookReceiver(t)
	w := newWorld(t, urls, 2, "RELAY_NATS_URL="+jetstream.URL(), "WEBHOOK_ALLOW_PRIVATE=true",
		"WEBHOOK_RETRY_INITIAL=100ms", "WEBHOOK_RETRY_MAX=1s")
	var endpoint struct {
		ID string `json:"id"`
	}
	status, err := call(http.MethodPost, w.url("/v1/webhook-endpoints"), w.key, map[string]any{"url": hooks.URL}, &endpoint)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)

	wr := w.startWriter(20 * time.Millisecond)
	projections := aggregates.Projections()
	outages, live, promoted := map[string]figures{}, map[string]figures{}, map[string]figures{}
	for round := range *haRounds {
		kind := haFaults[round%len(haFaults)]
		require.NoError(t, cluster.AwaitReady(ctx))
		w.awaitFlowing(projections)
		leads := w.settledSpread()
		primary, err := cluster.Primary(ctx)
		require.NoError(t, err)
		other := (primary + 1) % cluster.Nodes()
		member := (round / len(haFaults)) % cluster.Etcd()

		watch := w.watchLive(projections)
		var switched chan error
		injected := time.Now()
		switch kind {
		case "kill":
			cluster.Kill(primary)
		case "switchover":
			switched = make(chan error, 1)
			go func() { switched <- cluster.Switchover(ctx, other) }() // it returns once the old primary streams again
		case "freeze":
			cluster.Freeze(primary)
		case "etcd":
			cluster.KillEtcd(member)
		}
		// The fault is over for Hearth once the new primary is in place
		// (Patroni reports it) and a write is acknowledged after that.
		if kind != "etcd" {
			awaitLeader(t, cluster, other) // Patroni's view trails the promotion by up to a loop
		}
		placed := time.Now()
		if kind != "etcd" {
			promoted[kind] = append(promoted[kind], placed.Sub(injected))
		}
		if switched != nil {
			require.NoError(t, <-switched)
		}
		var acks []time.Time
		require.Eventually(t, func() bool {
			_, acks = wr.acksSince(placed)
			return len(acks) > 0
		}, 2*time.Minute, 10*time.Millisecond, "round %d (%s): a write is acknowledged after the new primary is in place", round, kind)
		outage, resumed := wr.outage(injected, acks[0])
		outages[kind] = append(outages[kind], outage)
		took, each := watch.after(resumed, wr)
		live[kind] = append(live[kind], took)
		t.Logf("round %2d %-10s node%d: Patroni's new primary after %v, write outage %v, every projection live %v after (%v)", round, kind, primary,
			placed.Sub(injected).Round(time.Millisecond), outage.Round(time.Millisecond), took.Round(time.Millisecond), each)

		switch kind {
		case "kill":
			require.NoError(t, cluster.Restart(primary))
		case "freeze":
			cluster.Thaw(primary) // Patroni demotes it: it follows the new primary
		case "etcd":
			require.NoError(t, cluster.RestartEtcd(member))
		}
		for _, p := range append([]*proc{w.api}, w.workers...) {
			require.False(t, p.exited(), "%s is still running", p.name)
		}
		if kind != "etcd" {
			// The locks died with the old primary's sessions: every
			// projection is led again, under a newer term (terms live in
			// replicated tables).
			for p, l := range w.settledSpread() {
				require.Greater(t, l.term, leads[p].term, "round %d (%s): %s led under a newer term", round, kind, p)
			}
		}
	}
	require.NoError(t, cluster.AwaitReady(ctx))
	w.awaitFlowing(projections)
	wr.halt()

	w.checkAcknowledged(wr)
	events := w.checkExactlyOnce()
	outOfOrder := hooks.outOfOrder(t, w)
	missing := w.missingFromJetStream(t, jetstream.URL())

	var summary []string
	say := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		t.Log(line)
		summary = append(summary, line)
	}
	say("writer: %d commands acknowledged, 0 lost; %d failed during the faults; %d events, 0 applied twice",
		wr.ok.Load(), wr.failed.Load(), events)
	say("webhooks: %d deliveries, %d out of order per aggregate; JetStream: %d events missing", hooks.count(), outOfOrder, missing)
	for _, kind := range haFaults {
		say("%-10s write outage %v; projections live after %v; Patroni's new primary after %v", kind, outages[kind], live[kind], promoted[kind])
	}
	require.Zero(t, outOfOrder, "webhook deliveries out of order")
	require.Zero(t, missing, "events missing from JetStream")
	if *haReport != "" {
		require.NoError(t, writeSection(*haReport, "make chaos-ha", haReportHeader+
			fmt.Sprintf("%s; %d rounds; Patroni TTL %v, loop_wait %v; 2 Postgres nodes (synchronous_mode), 3 etcd members\n\n",
				harness.Machine("make chaos-ha"), *haRounds, patroni.TTL, patroni.LoopWait)+
			"```\n"+strings.Join(summary, "\n")+"\n```\n"))
	}
}

const haReportHeader = `## Database failover

Written by ` + "`make chaos-ha`" + ` (internal/chaos, TestChaosHA) at the end of a passing run; never
edit it by hand. Hearth (an api process, two workers, webhook delivery and the relay to
JetStream on) runs on a Patroni cluster through its multi-host URL while a writer issues
commands through the API; each round injects one fault, in turn: the primary's machine lost
(Patroni and Postgres killed), a planned switchover, the primary's machine frozen (SIGSTOP of
Patroni and Postgres) until Patroni replaced it, then resumed, and one of three etcd members
lost. Write outage: the longest wait between two acknowledged writes, from the last before the
fault to the first after the new primary is in place. Projections live: from the end of the
outage until every projection has applied an event written after it. Patroni's new primary:
from the fault until Patroni's REST API reports the new leader running (what Patroni takes,
TTL included; the write outage can end a little before it, as Patroni's report trails the
promotion). What to expect, and why, is in [operations.md](operations.md) ("Database
connections and failover").

`

// awaitLeader waits until Patroni reports node i as the running leader.
func awaitLeader(t *testing.T, c *patroni.Cluster, i int) {
	t.Helper()
	require.Eventually(t, func() bool {
		p, err := c.Primary(context.Background())
		return err == nil && p == i
	}, 2*time.Minute, 50*time.Millisecond, "node%d leads", i)
}

// outage is the longest wait between two acknowledgements from the last
// one before from until until (an acknowledgement), and when the wait
// ended.
func (wr *writer) outage(from, until time.Time) (longest time.Duration, ended time.Time) {
	before, after := wr.acksSince(from)
	prev := orFrom(before, from)
	for _, at := range after {
		if at.After(until) {
			break
		}
		if gap := at.Sub(prev); gap > longest {
			longest, ended = gap, at
		}
		prev = at
	}
	return longest, ended
}

// orFrom is before, or from when there was no acknowledgement before it.
func orFrom(before, from time.Time) time.Time {
	if before.IsZero() {
		return from
	}
	return before
}

// awaitFlowing waits until every projection applies the writer's events.
func (w *world) awaitFlowing(projections []string) {
	w.t.Helper()
	mark := w.maxChangeID()
	require.Eventually(w.t, func() bool {
		for _, p := range projections {
			if !w.projected(p, mark) {
				return false
			}
		}
		return true
	}, 2*time.Minute, 10*time.Millisecond, "the writer's events are being projected, in every projection")
}

// liveWatch records, from the moment it starts, when each projection's
// newest applied event changes, so that the time each projection went
// live again after an outage can be read afterwards (when the outage's end
// is known).
type liveWatch struct {
	w       *world
	types   map[string]string // aggregate type -> projection
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	samples []liveSample
	lastErr error // of the latest look that failed
}

// liveSample is one look at the change log: when, and per projection the
// newest occurred_at of the events it applied since the watch began.
type liveSample struct {
	at     time.Time
	newest map[string]time.Time
}

func (w *world) watchLive(projections []string) *liveWatch {
	lw := &liveWatch{w: w, types: map[string]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	for _, p := range projections {
		lw.types[aggregateType(p)] = p
	}
	mark := w.maxChangeID()
	go func() {
		defer close(lw.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-lw.stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			rows, err := w.rm.DB.QueryContext(ctx, "SELECT aggregate_type, max(occurred_at) FROM change_log WHERE id > $1 GROUP BY 1", mark)
			sample := liveSample{newest: map[string]time.Time{}}
			for err == nil && rows.Next() {
				var typ string
				var at time.Time
				if rows.Scan(&typ, &at) == nil {
					sample.newest[lw.types[typ]] = at
				}
			}
			if err == nil {
				err = errors.Join(rows.Err(), rows.Close())
			}
			cancel()
			lw.mu.Lock()
			if err == nil {
				sample.at = time.Now()
				lw.samples = append(lw.samples, sample)
			} else {
				lw.lastErr = err
			}
			lw.mu.Unlock()
		}
	}()
	return lw
}

// after waits until every projection has applied an event that occurred
// after since, stops the watch, and returns how long after since the last
// of them went live, and each one's time.
func (lw *liveWatch) after(since time.Time, wr *writer) (time.Duration, map[string]time.Duration) {
	t := lw.w.t
	t.Helper()
	defer func() { close(lw.stop); <-lw.done }()
	each := map[string]time.Duration{}
	found := func() bool {
		lw.mu.Lock()
		defer lw.mu.Unlock()
		for _, s := range lw.samples {
			for p, newest := range s.newest {
				if _, ok := each[p]; !ok && newest.After(since) {
					each[p] = s.at.Sub(since)
				}
			}
		}
		return len(each) == len(lw.types)
	}
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for deadline := time.Now().Add(2 * time.Minute); !found(); <-poll.C {
		if time.Now().After(deadline) {
			lw.mu.Lock()
			n, last, lastErr := len(lw.samples), liveSample{}, lw.lastErr
			if n > 0 {
				last = lw.samples[n-1]
			}
			lw.mu.Unlock()
			_, acks := wr.acksSince(since)
			t.Fatalf("not every projection applied an event written after %s: live %v; %d looks at the change log, the last at %s: %v; its last error: %v; %d writes acknowledged since",
				since.Format(time.TimeOnly+".000"), each, n, last.at.Format(time.TimeOnly+".000"), last.newest, lastErr, len(acks))
		}
	}
	var last time.Duration
	for _, d := range each {
		last = max(last, d)
	}
	return last, each
}

// hookReceiver records the webhook deliveries: per aggregate, the versions
// in the order they arrived.
type hookReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	versions map[string][]int // aggregate id -> versions, in arrival order
	ids      map[string]bool  // event ids delivered
	n        int
}

func newHookReceiver(t *testing.T) *hookReceiver {
	h := &hookReceiver{versions: map[string][]int{}, ids: map[string]bool{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var e publicevent.Event
		if err := json.Unmarshal(body, &e); err == nil && e.AggregateID != "" {
			h.mu.Lock()
			h.versions[e.AggregateID] = append(h.versions[e.AggregateID], e.AggregateVersion)
			h.ids[e.ID] = true
			h.n++
			h.mu.Unlock()
		}
		rw.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hookReceiver) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// outOfOrder waits until every event of the event store has been
// delivered, and counts the deliveries that came after a later version of
// the same aggregate (a repeat of the latest version, at least once, is
// not out of order).
func (h *hookReceiver) outOfOrder(t *testing.T, w *world) int {
	t.Helper()
	ids := w.publicEvents()
	require.Eventually(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, id := range ids {
			if !h.ids[id] {
				return false
			}
		}
		return true
	}, 2*time.Minute, 50*time.Millisecond, "every event delivered to the webhook endpoint")
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, vs := range h.versions {
		highest := 0
		for _, v := range vs {
			if v < highest {
				n++
			}
			highest = max(highest, v)
		}
	}
	return n
}

// missingFromJetStream waits until the relay's stream holds at least as
// many messages as the event store has events, then counts the events
// whose message is not in it.
func (w *world) missingFromJetStream(t *testing.T, url string) int {
	t.Helper()
	ids := w.publicEvents()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := nc.JetStream()
	require.NoError(t, err)
	var msgs uint64
	require.Eventually(t, func() bool {
		info, err := js.StreamInfo("HEARTH")
		if err == nil {
			msgs = info.State.Msgs
		}
		return err == nil && msgs >= uint64(len(ids))
	}, 2*time.Minute, 50*time.Millisecond, "the relay publishes every event (%d events)", len(ids))
	sub, err := js.SubscribeSync(">", nats.BindStream("HEARTH"), nats.OrderedConsumer(), nats.DeliverAll())
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	seen := map[string]bool{}
	for range msgs {
		m, err := sub.NextMsg(10 * time.Second)
		require.NoError(t, err)
		var e publicevent.Event
		require.NoError(t, json.Unmarshal(m.Data, &e))
		seen[e.ID] = true
	}
	missing := 0
	for _, id := range ids {
		if !seen[id] {
			missing++
		}
	}
	return missing
}

// publicEvents lists the ids of the events of the projected aggregates,
// which webhooks deliver and the relay publishes.
func (w *world) publicEvents() []string {
	w.t.Helper()
	var types []string
	for _, f := range aggregates.All() {
		types = append(types, f.Type)
	}
	var ids []string
	require.NoError(w.t, w.es.NewRaw("SELECT event_id::text FROM events WHERE stream_type IN (?)", bun.In(types)).Scan(context.Background(), &ids))
	return ids
}
