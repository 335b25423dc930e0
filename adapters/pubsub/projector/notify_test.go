package projector_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/internal/pubsubtest"
	"hearth/adapters/pubsub/projector"
	"hearth/internal/pgtest"
)

// The subscriptions of one subscriber wait apart: once the context of one
// ends, a later subscription on another topic still waits for its fallback
// interval between empty polls, logs a failing query at Error (not as a
// query cut short by the subscription's end), and Close leaves no goroutine
// behind, even for a subscription whose context never ends.
//
// Not parallel: goleak compares with the goroutines at the start.
func TestSubscriptionsOfOneSubscriberWaitApart(t *testing.T) {
	urls := pgtest.NewDB(t)
	db := &pollingDB{DB: pgtest.Open(t, urls.EventStore).DB}
	ignore := goleak.IgnoreCurrent()
	// Not running: no notification comes, every wait is the fallback.
	n, err := projector.NewNotifier(urls.EventStore, quietLog())
	require.NoError(t, err)
	logs := &logRecords{}
	const fallback = 100 * time.Millisecond
	sub, err := projector.NotifyingSubscribers(projector.SubscribersConfig{DB: db, Notifier: n, Fallback: fallback, Log: slog.New(logs)})("group")
	require.NoError(t, err)

	first, cancel := context.WithCancel(context.Background())
	out, err := sub.Subscribe(first, pubsub.TopicOrders)
	require.NoError(t, err)
	cancel()
	require.Eventually(t, func() bool { return closed(out) }, 5*time.Second, time.Millisecond)

	// From here on, every poll is the second subscription's (its first
	// transaction is the one before subscribing). Its first empty polls are
	// quick (1 ms doubling); from the 9th, each waits the fallback.
	mark := db.count()
	_, err = sub.Subscribe(context.Background(), pubsub.TopicPoison)
	require.NoError(t, err)
	const polls = 14
	require.Eventually(t, func() bool { return db.count() >= mark+polls }, 10*time.Second, time.Millisecond)
	times := db.since(mark)
	span := times[polls-1].Sub(times[polls-5])
	require.GreaterOrEqual(t, span, 2*fallback,
		"the last 4 of %d polls on an empty topic took %s (%d polls in %s in all); each should wait about %s",
		polls, span, db.count()-mark, time.Since(times[0]).Round(time.Millisecond), fallback)

	// The first subscription may have logged its last query as cut short.
	cutShort := logs.count(slog.LevelDebug, "Query cut short")
	db.fail.Store(true)
	require.Eventually(t, func() bool { return logs.count(slog.LevelError, "Error querying for message") > 0 },
		5*time.Second, time.Millisecond, "a failing query is logged at Error")
	require.Equal(t, cutShort, logs.count(slog.LevelDebug, "Query cut short"), "nor as a query cut short")
	db.fail.Store(false)

	require.NoError(t, sub.Close())
	goleak.VerifyNone(t, ignore)
}

// pollingDB is a subscriber's database that notes when each transaction
// begins (one per poll), and fails them while fail is set.
type pollingDB struct {
	*sql.DB
	fail  atomic.Bool
	mu    sync.Mutex
	polls []time.Time
}

func (d *pollingDB) BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error) {
	d.mu.Lock()
	d.polls = append(d.polls, time.Now())
	d.mu.Unlock()
	if d.fail.Load() {
		return nil, errors.New("injected: the database is unreachable")
	}
	return d.DB.BeginTx(ctx, opts)
}

func (d *pollingDB) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.polls)
}

func (d *pollingDB) since(i int) []time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Time(nil), d.polls[i:]...)
}

// closed reports whether ch is closed, draining a message if one waits.
func closed[T any](ch <-chan T) bool {
	select {
	case _, ok := <-ch:
		return !ok
	default:
		return false
	}
}

// logRecords is a slog handler that counts records by level and message.
type logRecords struct {
	mu     sync.Mutex
	counts map[slog.Level]map[string]int
}

// count returns how many records of level have a message starting with
// prefix.
func (l *logRecords) count(level slog.Level, prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for msg, c := range l.counts[level] {
		if strings.HasPrefix(msg, prefix) {
			n += c
		}
	}
	return n
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil {
		l.counts = map[slog.Level]map[string]int{}
	}
	if l.counts[r.Level] == nil {
		l.counts[r.Level] = map[string]int{}
	}
	l.counts[r.Level][r.Message]++
	return nil
}
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecords) WithGroup(string) slog.Handler      { return l }

// A subscribers' config without its database, notifier or fallback makes
// no subscriber and says what is missing.
func TestNotifyingSubscribersNeedTheirConfig(t *testing.T) {
	t.Parallel()
	n, err := projector.NewNotifier("postgres://nobody@127.0.0.1:1/none", quietLog())
	require.NoError(t, err)
	db := &sql.DB{}
	for _, cfg := range []projector.SubscribersConfig{
		{Notifier: n, Fallback: time.Second},
		{DB: db, Fallback: time.Second},
		{DB: db, Notifier: n},
	} {
		_, err := projector.NotifyingSubscribers(cfg)("group")
		require.ErrorContains(t, err, "DB, Notifier and a positive Fallback are required")
	}
	sub, err := projector.NotifyingSubscribers(projector.SubscribersConfig{DB: db, Notifier: n, Fallback: time.Second})("group")
	require.NoError(t, err)
	require.NoError(t, sub.Close())
}

// listening returns a notifier on url, running until the test ends, once
// it listens (db is the same database).
func listening(t *testing.T, url string, db *sql.DB) *projector.Notifier {
	n := runNotifier(t, url)
	heard := n.AnyChanged() // closed by the first notification, or once it listens
	require.Eventually(t, func() bool {
		_, err := db.Exec(`SELECT pg_notify($1, 'nothing')`, projector.NotifyChannel)
		return err == nil && closed(heard)
	}, 30*time.Second, 5*time.Millisecond)
	return n
}

// A message committed but hidden from a read that found others (an older
// transaction is still open, so pg_snapshot_xmin hides it) is read soon
// after that transaction ends, though no notification comes then: the
// read reported it hidden, so the subscriber re-reads quickly instead of
// waiting for the fallback (an hour here).
func TestAHiddenMessageIsReadOnceVisible(t *testing.T) {
	urls := pgtest.NewDB(t)
	f := pubsubtest.Setup(t, urls)
	n := listening(t, urls.EventStore, f.ES.DB)
	db := &pollingDB{DB: f.ES.DB}
	sub, err := projector.NotifyingSubscribers(projector.SubscribersConfig{DB: db, Notifier: n, Fallback: time.Hour, Log: quietLog()})("hidden")
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })

	first := f.CreateOrder(t)
	older, err := f.ES.DB.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = older.Rollback() })
	_, err = older.Exec(`SELECT pg_current_xact_id()`) // an id, older than the next order's
	require.NoError(t, err)
	notified := n.Changed(pubsub.TopicOrders)
	hidden := f.CreateOrder(t)
	<-notified // before the subscriber exists: its first read is not one after a notification

	out, err := sub.Subscribe(t.Context(), pubsub.TopicOrders)
	require.NoError(t, err)
	msg := <-out
	require.Equal(t, first, msg.Metadata.Get("stream_id"))
	found := db.count()
	msg.Ack()
	// The read again at once finds nothing (the message is still hidden);
	// a quick re-read follows it, not the fallback. Sooner than the
	// notifier's check of a quiet connection (5 s), which wakes everyone.
	require.Eventually(t, func() bool { return db.count() >= found+2 }, 3*time.Second, time.Millisecond,
		"no quick re-read while the message is hidden")
	require.NoError(t, older.Commit()) // writes no message: no notification

	select {
	case msg := <-out:
		require.Equal(t, hidden, msg.Metadata.Get("stream_id"))
		msg.Ack()
	case <-time.After(2 * time.Second): // the quick re-reads wait a second at most
		t.Fatal("the message hidden from the first read was not read once visible")
	}
}

// While a handler holds a message (applying it, or sleeping through its
// retries), the poll that read it holds no transaction open: a session idle
// in a repeatable-read transaction would keep its snapshot, holding back
// vacuum across the server, and would be cut by an operator's
// idle_in_transaction_session_timeout. The message is acked all the same.
func TestAPollHoldsNoTransactionWhileItsHandlerRuns(t *testing.T) {
	urls := pgtest.NewDB(t)
	f := pubsubtest.Setup(t, urls)
	n := listening(t, urls.EventStore, f.ES.DB)
	sub, err := projector.NotifyingSubscribers(projector.SubscribersConfig{DB: f.ES.DB, Notifier: n, Fallback: time.Hour, Log: quietLog()})("holding")
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	out, err := sub.Subscribe(t.Context(), pubsub.TopicOrders)
	require.NoError(t, err)

	inTx := func() (n int) {
		require.NoError(t, f.ES.DB.QueryRow(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state LIKE 'idle in transaction%'`).Scan(&n))
		return n
	}
	first := f.CreateOrder(t)
	msg := <-out
	require.Equal(t, first, msg.Metadata.Get("stream_id"))
	require.Zero(t, inTx(), "a session waits in a transaction while the handler holds the message")
	msg.Ack()

	second := f.CreateOrder(t)
	msg = <-out
	require.Equal(t, second, msg.Metadata.Get("stream_id"), "the first message was acked")
	msg.Ack()
}

// runNotifier runs a notifier on url until the test ends.
func runNotifier(t *testing.T, url string) *projector.Notifier {
	t.Helper()
	n, err := projector.NewNotifier(url, quietLog())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return n
}
