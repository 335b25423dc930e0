package pubsub_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/projector"
	"hearth/app/query"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
)

var update = flag.Bool("update", false, "rewrite docs/query-plans-feed.md from the plans")

// notifications stands for the projector's Notifier: Changed's channel is
// closed by notify.
type notifications struct {
	mu sync.Mutex
	ch chan struct{}
}

func (n *notifications) Changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifications) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}

// runWatcher runs a watcher woken by n, with a fallback of an hour (only
// notifications and the quick polls after them count), until the test
// ends.
func runWatcher(t *testing.T, f fixture, n *notifications) *pubsub.FeedWatcher {
	t.Helper()
	return startWatcher(t, pubsub.FeedWatcherConfig{DB: f.ES.DB, Changed: n.Changed, Fallback: time.Hour})
}

// startWatcher runs a watcher of cfg until the test ends.
func startWatcher(t *testing.T, cfg pubsub.FeedWatcherConfig) *pubsub.FeedWatcher {
	t.Helper()
	w, err := pubsub.NewFeedWatcher(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return w
}

func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// The watcher wakes the waiters of the merchant whose events became
// readable, and only those: a waiter of another merchant costs no read.
// Its first poll, when someone begins to wait, wakes everyone instead.
func TestFeedWatcherWakesTheMerchantsWaiters(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	other := uuid.New()
	n := &notifications{}
	w := runWatcher(t, f, n)

	mine, stopMine := w.Watch(f.MerchantID)
	theirs, stopTheirs := w.Watch(other)
	require.Equal(t, 2, w.Waiting())
	require.True(t, closedWithin(mine, 10*time.Second), "the first poll wakes every waiter")
	require.True(t, closedWithin(theirs, 10*time.Second), "the first poll wakes every waiter")
	stopMine()
	stopTheirs()

	for range 3 {
		mine, stopMine = w.Watch(f.MerchantID)
		theirs, stopTheirs = w.Watch(other)
		f.CreateOrder(t)
		n.notify()
		require.True(t, closedWithin(mine, 10*time.Second), "the merchant's waiter is woken")
		// Both would be woken by the same call, under one lock.
		require.False(t, closedWithin(theirs, 0), "another merchant's waiter is not")
		stopMine()
		stopTheirs()
	}
	require.Equal(t, 0, w.Waiting())
}

// A notification that comes before its events are readable (an older
// transaction still runs) is followed by quick polls until they are.
func TestFeedWatcherPollsUntilNotifiedEventsAreReadable(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	n := &notifications{}
	w := runWatcher(t, f, n)
	first, stop := w.Watch(f.MerchantID)
	require.True(t, closedWithin(first, 10*time.Second))
	stop()

	// An older transaction with an id (it writes), which sends no
	// notification when it ends.
	ctx := t.Context()
	older, err := f.ES.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = older.ExecContext(ctx, `UPDATE customers SET notes = 'x' WHERE id = $1`, f.CustomerID)
	require.NoError(t, err)
	mine, stop := w.Watch(f.MerchantID)
	defer stop()
	f.CreateOrder(t)
	n.notify()
	require.False(t, closedWithin(mine, 50*time.Millisecond), "not readable while the older transaction runs")
	require.NoError(t, older.Commit())
	require.True(t, closedWithin(mine, 10*time.Second), "woken without another notification, long before the fallback")
}

// With Listen (an API instance's notifier), the watcher listens only
// while someone waits and for the linger after: the notifications wake the
// waiters (the fallback is an hour), and an instance without waiters holds
// no LISTEN session, so no commit sends it a notification.
func TestFeedWatcherListensOnlyWhileSomeoneWaits(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	f := setup(t, urls)
	notifier, err := projector.NewNotifier(urls.EventStore, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	w := startWatcher(t, pubsub.FeedWatcherConfig{DB: f.ES.DB, Changed: notifier.AnyChanged, Fallback: time.Hour,
		Listen: notifier.Run, ListenLinger: 10 * time.Millisecond})
	listeners := func() int {
		var n int
		require.NoError(t, f.ES.DB.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`,
			projector.NotifyApplicationName).Scan(&n))
		return n
	}

	for range 2 {
		first, stopFirst := w.Watch(f.MerchantID)
		require.True(t, closedWithin(first, 10*time.Second), "the first poll wakes every waiter")
		require.Eventually(t, func() bool { return listeners() == 1 }, 10*time.Second, 5*time.Millisecond, "it listens while someone waits")
		// Once it listens, a waiter is woken by a commit's notification
		// (and by the first notification after LISTEN, at the latest).
		mine, stop := w.Watch(f.MerchantID)
		stopFirst()
		f.CreateOrder(t)
		require.True(t, closedWithin(mine, 10*time.Second), "the commit's notification wakes the waiter")
		stop()
		require.Eventually(t, func() bool { return listeners() == 0 }, 10*time.Second, 5*time.Millisecond, "it stops listening after the linger")
	}
}

// The feed's page and the watcher's poll stay index scans in order on a
// merchant with 100,000 events among others: no sequential scan, no sort.
// With -update the plans go to docs/query-plans-feed.md.
//
// Not parallel: loading holds back pg_snapshot_xmin for seconds.
func TestFeedPlans(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 106,000 events; skipped with -short")
	}
	urls := pgtest.NewDB(t)
	db := pgtest.Open(t, urls.EventStore)
	ctx := context.Background()
	big := "00000000-0000-4000-8000-000000000001"
	_, err := db.ExecContext(ctx, `
		INSERT INTO merchants (id, name)
		SELECT ('00000000-0000-4000-8000-00000000000' || i)::uuid, 'm' || i FROM generate_series(1, 6) AS i;
		CREATE TEMP TABLE m AS
		SELECT ('00000000-0000-4000-8000-00000000000' || i)::uuid AS id, CASE i WHEN 1 THEN 100000 ELSE 1000 END AS n
		FROM generate_series(1, 6) AS i;
		INSERT INTO events (event_id, stream_type, stream_id, version, merchant_id, type, data, occurred_at, correlation_id, actor)
		SELECT gen_random_uuid(), 'order', gen_random_uuid(), 1, m.id, 'OrderCreated', '{}', now(), 'c', 'a'
		FROM m, generate_series(1, m.n)`)
	require.NoError(t, err)
	// Many transactions, as in life: later events in transactions of their own.
	for range 50 {
		_, err := db.ExecContext(ctx, `
			INSERT INTO events (event_id, stream_type, stream_id, version, merchant_id, type, data, occurred_at, correlation_id, actor)
			SELECT gen_random_uuid(), 'order', gen_random_uuid(), 1, ?::uuid, 'OrderCreated', '{}', now(), 'c', 'a'
			FROM generate_series(1, 20)`, big)
		require.NoError(t, err)
	}
	_, err = db.DB.ExecContext(ctx, "VACUUM (FREEZE, ANALYZE) events")
	require.NoError(t, err)

	var mid query.FeedCursor
	var txid string
	require.NoError(t, db.DB.QueryRowContext(ctx, `SELECT transaction_id::text, position FROM events WHERE merchant_id = $1 ORDER BY events.transaction_id, position OFFSET 50000 LIMIT 1`, big).
		Scan(&txid, &mid.Position))
	_, err = fmt.Sscan(txid, &mid.Transaction)
	require.NoError(t, err)

	cases := []struct {
		name, sql string
		args      []string
		index     string
	}{
		{"feed page: from the start, limit 100", pubsub.FeedPageSQL, []string{"'" + big + "'", "'0'", "0", "100"}, "events_merchant_feed"},
		{"feed page: from the middle, limit 1000", pubsub.FeedPageSQL, []string{"'" + big + "'", fmt.Sprintf("'%d'", mid.Transaction), fmt.Sprint(mid.Position), "1000"}, "events_merchant_feed"},
		{"feed page: a small merchant", pubsub.FeedPageSQL, []string{"'00000000-0000-4000-8000-000000000002'", "'0'", "0", "100"}, "events_merchant_feed"},
		{"watcher poll", pubsub.FeedPollSQL, []string{fmt.Sprintf("'%d'", mid.Transaction)}, "events_transaction"},
	}
	var doc strings.Builder
	for _, c := range cases {
		for _, generic := range []bool{false, true} {
			conn, err := db.DB.Conn(ctx)
			require.NoError(t, err)
			mode := "custom"
			if generic {
				mode = "generic"
				_, err = conn.ExecContext(ctx, `SET plan_cache_mode = force_generic_plan`)
				require.NoError(t, err)
			}
			_, err = conn.ExecContext(ctx, `PREPARE q AS `+c.sql)
			require.NoError(t, err)
			execute := `EXECUTE q(` + strings.Join(c.args, ", ") + `)`
			plan, raw := pgtest.Explain(t, conn, execute)
			used := false
			plan.Walk(func(n pgtest.PlanNode) {
				if n.RelationName == "events" {
					require.NotEqual(t, "Seq Scan", n.NodeType, "%s (%s plan): a sequential scan of the events:\n%s", c.name, mode, raw)
				}
				require.NotContains(t, n.NodeType, "Sort", "%s (%s plan): a sort:\n%s", c.name, mode, raw)
				used = used || n.IndexName == c.index
			})
			require.True(t, used, "%s (%s plan): %s is not used:\n%s", c.name, mode, c.index, raw)
			if !generic {
				fmt.Fprintf(&doc, "### %s\n\n```sql\n%s\n```\n\nwith %s:\n\n", c.name, strings.TrimSpace(dedent(c.sql)), strings.Join(c.args, ", "))
			}
			fmt.Fprintf(&doc, "%s plan:\n\n```\n%s\n```\n\n", mode, pgtest.ExplainAnalyze(t, conn, execute))
			_, err = conn.ExecContext(ctx, `DEALLOCATE q; RESET plan_cache_mode`)
			require.NoError(t, err)
			require.NoError(t, conn.Close())
		}
	}
	if *update {
		header := `# Query plans of the event feed

Generated by ` + "`go test ./adapters/pubsub -run TestFeedPlans -update`" + ` (Postgres 15, the test
cluster): the events table holds 101,000 events of one merchant (100,000 written in one
transaction, then 50 transactions of 20) and 1,000 of each of five others, after
` + "`VACUUM (FREEZE, ANALYZE)`" + `. The statements are the adapter's own (` + "`adapters/pubsub/feed.go`" + `),
prepared as pgx prepares them, and planned both ways Postgres may plan a prepared statement:
for its values (custom) and for any values (generic, which Postgres may switch to after five
executions).

What the test asserts: no ` + "`Seq Scan`" + ` of the events and no ` + "`Sort`" + ` node in either plan. A page walks
` + "`events_merchant_feed`" + ` (` + "`merchant_id, transaction_id, position`" + `, migrations/eventstore/007) in
order from the cursor and stops after ` + "`LIMIT`" + ` rows; the watcher's poll walks
` + "`events_transaction`" + ` over the transactions that ended since its last poll. Timings are from one
run and only indicative.

`
		require.NoError(t, os.WriteFile("../../docs/query-plans-feed.md", []byte(header+doc.String()), 0o644))
	}
}

func dedent(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "\t")
	}
	return strings.Join(lines, "\n")
}
