package pubsub

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"hearth/app/publicevent"
	"hearth/app/query"
	"hearth/domain/event"
	"hearth/internal/aggregates"
)

// Feed reads merchants' event feeds from the events table (query.FeedStore):
// in order of transaction id, then position, and only events of
// transactions older than every transaction still running, as watermill-sql
// v3 reads a topic (see app/query/feed.go for why). The index
// events_merchant_feed (migrations/eventstore/007) answers a page in order.
type Feed struct {
	db       *sql.DB
	dec      aggregates.Decoders
	prefetch func(data [][]byte) // nil: dec reads each key itself
}

// Prefetcher is a Decoders that can read the keys of many events' sealed
// fields at once (the vault's PrefetchData), before they are decoded.
type Prefetcher interface {
	PrefetchData(data [][]byte)
}

// NewFeed returns the feed on the event-store database (the request pool);
// dec opens the events' sealed fields (the vault; nil leaves them sealed).
// When dec is a Prefetcher, each page's keys are read in one lookup: one
// per customer, a page of events about a thousand customers whose keys
// no instance holds cost a thousand round trips, and a read with types,
// which looks at up to ten pages, ten times that, for one request.
func NewFeed(db *sql.DB, dec aggregates.Decoders) (*Feed, error) {
	if db == nil {
		return nil, errors.New("pubsub.NewFeed: nil db")
	}
	f := &Feed{db: db, dec: aggregates.Or(dec)}
	if p, ok := dec.(Prefetcher); ok {
		f.prefetch = p.PrefetchData
	}
	return f, nil
}

// feedPageSQL is a page of one merchant's feed. An event an operator skipped
// in its aggregate's projection is flagged (the projection's name comes from
// the stream type: internal/aggregates), so that the feed shows it as the
// read models applied it.
//
// The cursor is compared as (merchant_id, transaction_id, position), the
// index's own columns, and not as (transaction_id, position): Postgres
// derives "transaction_id >= $2" from the shorter row, and a generic plan
// (which a prepared statement may switch to after five runs) then preferred
// events_transaction and a sort, reading every event of every merchant
// after the cursor (docs/query-plans-feed.md).
var feedPageSQL = `
	SELECT e.transaction_id::text, e.position, e.event_id, e.type, e.stream_type, e.stream_id, e.version,
	       e.merchant_id, e.occurred_at, e.correlation_id, e.causation_id, e.actor, e.data,
	       EXISTS (SELECT 1 FROM skipped_events s
	               WHERE s.projection = ` + projectionOfStream("e.stream_type") + ` AND s.event_id = e.event_id)
	FROM events e
	WHERE e.merchant_id = $1 AND (e.merchant_id, e.transaction_id, e.position) > ($1, $2::text::xid8, $3)
	  AND e.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
	ORDER BY e.merchant_id, e.transaction_id, e.position
	LIMIT $4`

// projectionOfStream is a SQL expression naming the projection of the
// stream type in column.
func projectionOfStream(column string) string {
	var b strings.Builder
	b.WriteString("CASE " + column)
	for _, f := range aggregates.All() {
		b.WriteString(" WHEN " + quote(f.Type) + " THEN " + quote(f.Projection))
	}
	b.WriteString(" END")
	return b.String()
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Page implements query.FeedStore.
func (f *Feed) Page(ctx context.Context, merchantID string, after query.FeedCursor, n int) ([]query.FeedEntry, error) {
	rows, err := f.db.QueryContext(ctx, feedPageSQL, merchantID, strconv.FormatUint(after.Transaction, 10), after.Position, n)
	if err != nil {
		return nil, fmt.Errorf("read the event feed: %w", err)
	}
	defer rows.Close()
	out := make([]query.FeedEntry, 0, n)
	skips := make([]bool, 0, n)
	for rows.Next() {
		var (
			txid    string
			e       query.FeedEntry
			env     event.Envelope
			skipped bool
		)
		if err := rows.Scan(&txid, &e.Cursor.Position, &env.ID, &env.Type, &env.StreamType, &env.StreamID, &env.Version,
			&env.MerchantID, &env.OccurredAt, &env.CorrelationID, &env.CausationID, &env.Actor, &env.Data, &skipped); err != nil {
			return nil, fmt.Errorf("read the event feed: %w", err)
		}
		if e.Cursor.Transaction, err = strconv.ParseUint(txid, 10, 64); err != nil {
			return nil, fmt.Errorf("read the event feed: transaction id %q: %w", txid, err)
		}
		env.OccurredAt = env.OccurredAt.UTC()
		e.Stored = publicevent.Stored{Recorded: event.Recorded{Envelope: env}, Position: e.Cursor.Position}
		out, skips = append(out, e), append(skips, skipped)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the event feed: %w", err)
	}
	// Decoded once the page is read: its keys first, in one lookup.
	if f.prefetch != nil {
		data := make([][]byte, 0, len(out))
		for i, e := range out {
			if !skips[i] {
				data = append(data, e.Stored.Data)
			}
		}
		f.prefetch(data)
	}
	for i := range out {
		e := &out[i]
		switch agg, ok := aggregates.OutboundByType(e.Stored.StreamType); {
		case skips[i]:
			e.Stored.Recorded = event.Skip(e.Stored.Recorded)
		case !ok:
			e.Err = fmt.Errorf("stream type %q is not an aggregate type", e.Stored.StreamType)
		default:
			if e.Stored.Event, err = f.dec.Decoder(agg)(e.Stored.Type, e.Stored.Data); err != nil {
				e.Err = err
			}
		}
	}
	return out, nil
}

// Holds implements query.FeedStore: one read of the events' primary key.
// Any merchant's event will do, since another merchant's cursor is only a
// place in the event store; what it tells apart is a cursor of an event
// that a restore of a backup lost (or a made-up one), which the events
// written since may sort before. Those take the transaction ids and
// positions the restored server's counters give, which the lost events had
// had too, so one of them may by chance hold the very place a lost event's
// cursor names: both at once, in one event, is what this does not tell.
func (f *Feed) Holds(ctx context.Context, c query.FeedCursor) (bool, error) {
	var holds bool
	err := f.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM events WHERE position = $1 AND transaction_id = $2::text::xid8)`,
		c.Position, strconv.FormatUint(c.Transaction, 10)).Scan(&holds)
	if err != nil {
		return false, fmt.Errorf("read the event feed: %w", err)
	}
	return holds, nil
}

// FeedWatcher tells the event feed's long polls when their merchant's feed
// may have grown (query.FeedWatch), for all of them at once: while anyone
// waits, it wakes on the notification every commit of events sends (the
// projections' Notifier, one LISTEN connection per process), and finds the
// merchants whose events became readable with one query, whatever the
// number of waiting requests:
//
//   - It keeps the xmin of its last snapshot (pg_snapshot_xmin, the oldest
//     transaction still running). The events that became readable since
//     are exactly those of transactions from the last xmin up to the new
//     one, and it wakes their merchants' waiters. A waiter of another
//     merchant is not woken and costs nothing.
//   - A notification can come before its events are readable: an older
//     transaction, which may send none (a projection's, an idempotency
//     key's), still runs. So after a notification it polls again after 1,
//     2, 4 ... ms (up to feedQuickMax, or the fallback if shorter) until its
//     xmin has passed every transaction that had begun at the notification
//     (the snapshot's xmax); and it polls every fallback interval anyway,
//     in case a notification was lost.
//   - When no one waits, it makes no query. When someone waits again, its
//     first poll wakes every waiter instead, since it does not know what
//     changed while it slept; so does a poll after a failed one.
//   - With Listen set (an API instance, whose only reader of notifications
//     it is), it also listens only while someone waits, and for
//     ListenLinger after: an instance without long polls then receives no
//     notification per commit. The first poll covers what was missed.
//
// A waiter watches (Watch) before it reads its page, so a change after the
// page's snapshot always closes its channel.
type FeedWatcher struct {
	db       *sql.DB
	changed  func() <-chan struct{}
	fallback time.Duration
	listen   func(context.Context) error
	linger   time.Duration
	log      *slog.Logger

	mu      sync.Mutex
	waiters map[string]*feedWaiters // by merchant
	count   int                     // waiters of every merchant
	kick    chan struct{}           // a first waiter came while none waited
}

// feedWaiters are the waiters of one merchant: ch is closed and replaced
// when they should read again.
type feedWaiters struct {
	ch chan struct{}
	n  int
}

// FeedWatcherConfig is what NewFeedWatcher needs.
type FeedWatcherConfig struct {
	// DB is the event-store database. Required. The watcher's query runs
	// with a timeout of its own.
	DB *sql.DB
	// Changed returns a channel closed by the next notification of a
	// commit of events (projector.Notifier.Changed). Required.
	Changed func() <-chan struct{}
	// Fallback is how often it polls while someone waits and no
	// notification comes. Required: its one default is the configuration's
	// (POLL_INTERVAL).
	Fallback time.Duration
	// Listen, when set, is run while anyone waits and for ListenLinger
	// after the last waiter leaves (projector.Notifier.Run, on an instance
	// where nothing else needs its notifications); it must return when its
	// context ends. Unset, the notifications are someone else's to run.
	Listen func(context.Context) error
	// ListenLinger defaults to DefaultFeedListenLinger.
	ListenLinger time.Duration
	// Log defaults to slog.Default().
	Log *slog.Logger
}

// DefaultFeedListenLinger is how long Listen runs on after the last
// waiter left: a client that long-polls in a loop leaves for a moment
// between its polls, and keeps one connection rather than opening one per
// poll.
const DefaultFeedListenLinger = time.Minute

// NewFeedWatcher returns a watcher; call Run.
func NewFeedWatcher(cfg FeedWatcherConfig) (*FeedWatcher, error) {
	if cfg.DB == nil || cfg.Changed == nil || cfg.Fallback <= 0 || cfg.ListenLinger < 0 {
		return nil, errors.New("pubsub.NewFeedWatcher: DB, Changed and Fallback are required, and ListenLinger cannot be negative")
	}
	return &FeedWatcher{db: cfg.DB, changed: cfg.Changed, fallback: cfg.Fallback,
		listen: cfg.Listen, linger: cmp.Or(cfg.ListenLinger, DefaultFeedListenLinger),
		log:     cmp.Or(cfg.Log, slog.Default()).With("component", "event_feed"),
		waiters: map[string]*feedWaiters{}, kick: make(chan struct{}, 1)}, nil
}

// Watch implements query.FeedWatch.
func (w *FeedWatcher) Watch(merchantID string) (<-chan struct{}, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fw := w.waiters[merchantID]
	if fw == nil {
		fw = &feedWaiters{ch: make(chan struct{})}
		w.waiters[merchantID] = fw
	}
	fw.n++
	w.count++
	if w.count == 1 {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	return fw.ch, sync.OnceFunc(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.count--
		if fw.n--; fw.n == 0 {
			delete(w.waiters, merchantID)
		}
	})
}

// Waiting returns how many reads of the feed watch now (long polls, with
// their reads between waits).
func (w *FeedWatcher) Waiting() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.count
}

// watched reports whether anyone waits.
func (w *FeedWatcher) watched() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.count > 0
}

// wake closes the channels of the merchants' waiters, or of every waiter.
func (w *FeedWatcher) wake(merchants []string, all bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if all {
		for _, fw := range w.waiters {
			close(fw.ch)
			fw.ch = make(chan struct{})
		}
		return
	}
	for _, m := range merchants {
		if fw := w.waiters[m]; fw != nil {
			close(fw.ch)
			fw.ch = make(chan struct{})
		}
	}
}

// Run watches until ctx ends.
func (w *FeedWatcher) Run(ctx context.Context) error {
	l := &listening{run: w.listen, log: w.log}
	defer l.stop()
	for {
		if !w.watched() && !w.idle(ctx, l) {
			return nil
		}
		l.start(ctx)
		w.watch(ctx)
		if ctx.Err() != nil {
			return nil
		}
	}
}

// idle waits until someone waits (false: ctx ended), and stops listening
// once the linger has passed.
func (w *FeedWatcher) idle(ctx context.Context, l *listening) bool {
	var linger <-chan time.Time
	if l.running() {
		t := time.NewTimer(w.linger)
		defer t.Stop()
		linger = t.C
	}
	for {
		select {
		case <-w.kick:
			return true
		case <-linger:
			l.stop()
			linger = nil
		case <-ctx.Done():
			return false
		}
	}
}

// listening runs FeedWatcherConfig.Listen, at most once at a time.
type listening struct {
	run    func(context.Context) error
	log    *slog.Logger
	cancel context.CancelFunc // of the run in progress; nil: none
	done   chan struct{}
}

func (l *listening) running() bool { return l.cancel != nil }

func (l *listening) start(ctx context.Context) {
	if l.run == nil || l.running() {
		return
	}
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		if err := l.run(ctx); err != nil {
			l.log.Warn("listening for notifications failed", "error", err)
		}
	}(l.done)
}

// stop ends the run in progress, if any, and waits for it.
func (l *listening) stop() {
	if !l.running() {
		return
	}
	l.cancel()
	<-l.done
	l.cancel, l.done = nil, nil
}

// feedPollTimeout bounds one poll of the watcher.
const feedPollTimeout = 5 * time.Second

// feedRetry is the wait after a failed poll.
const feedRetry = time.Second

// feedQuickMax caps the quick polls after a notification: an older writer
// that holds the notified events back (a rebuild's, a long batch's) costs
// ten cheap polls a second while it runs, and the events are answered
// within that of its end, whatever the fallback.
const feedQuickMax = 100 * time.Millisecond

// watch polls while anyone waits.
func (w *FeedWatcher) watch(ctx context.Context) {
	var (
		xmin     uint64
		synced   bool // xmin is known: a poll reports what changed since
		notified bool // a notification came since the last poll
		target   uint64
		quick    time.Duration
	)
	for w.watched() {
		seen := w.changed() // before the poll: a later commit closes it
		next, xmax, merchants, err := w.poll(ctx, xmin, synced)
		wait := w.fallback
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			w.log.Warn("poll for new events failed", "error", err, "retry_in", feedRetry)
			synced, wait = false, feedRetry
		default:
			w.wake(merchants, !synced)
			xmin, synced = next, true
			if notified {
				// Every event notified so far belongs to a transaction
				// below this snapshot's xmax.
				target, quick, notified = xmax, time.Millisecond, false
			}
			if quick > 0 && xmin >= target {
				quick = 0
			}
			if quick > 0 {
				wait, quick = quick, min(quick*2, w.fallback, feedQuickMax)
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-seen:
			notified = true
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// feedPollSQL reads the current snapshot's xmin and xmax and the merchants
// with events of transactions from $1 up to that xmin (none when $1 is
// NULL).
const feedPollSQL = `
	SELECT pg_snapshot_xmin(s)::text, pg_snapshot_xmax(s)::text,
	       coalesce((SELECT string_agg(DISTINCT merchant_id::text, ',') FROM events
	                 WHERE transaction_id >= $1::text::xid8 AND transaction_id < pg_snapshot_xmin(s)), '')
	FROM pg_current_snapshot() AS s`

// poll returns the snapshot's xmin and xmax and, when synced, the merchants
// whose events became readable since from.
func (w *FeedWatcher) poll(ctx context.Context, from uint64, synced bool) (xmin, xmax uint64, merchants []string, err error) {
	ctx, cancel := context.WithTimeout(ctx, feedPollTimeout)
	defer cancel()
	var arg any // NULL: only the snapshot
	if synced {
		arg = strconv.FormatUint(from, 10)
	}
	var rawMin, rawMax, list string
	if err := w.db.QueryRowContext(ctx, feedPollSQL, arg).Scan(&rawMin, &rawMax, &list); err != nil {
		return 0, 0, nil, fmt.Errorf("poll the event feed: %w", err)
	}
	if xmin, err = strconv.ParseUint(rawMin, 10, 64); err == nil {
		xmax, err = strconv.ParseUint(rawMax, 10, 64)
	}
	if err != nil {
		return 0, 0, nil, fmt.Errorf("poll the event feed: %w", err)
	}
	if list != "" {
		merchants = strings.Split(list, ",")
	}
	return xmin, xmax, merchants, nil
}
