package projector

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"hearth/adapters/pubsub"
	"hearth/internal/database"
)

// NotifyChannel is the Postgres channel on which a statement trigger on every
// topic table announces an insert (payload: the table name). Notifications
// are transactional: they are sent when the publishing transaction commits.
const NotifyChannel = "hearth_topics"

// NotifyApplicationName is the application_name of the LISTEN connection.
const NotifyApplicationName = "hearth-notify"

// Notifier wakes idle subscribers when their topic gets a message. It holds
// one dedicated LISTEN connection, outside any pool, and reconnects by
// itself (100 ms doubling to 5 s); after every (re)connection it wakes every
// subscriber, since notifications sent while it was away are lost.
//
// Subscribers keep a fallback poll: a notification can arrive before its
// row is visible to them (watermill-sql reads only below
// pg_snapshot_xmin), and none arrives while the connection is down.
type Notifier struct {
	cfg *pgx.ConnConfig // dialled as every Hearth connection (database.ParseConfig)
	log *slog.Logger

	mu      sync.Mutex
	signals map[string]chan struct{} // by table name; closed and replaced on each notification
}

// anyTable is the key of signals whose channel every notification closes.
const anyTable = ""

// NewNotifier returns a notifier on the event-store database. Call Run.
func NewNotifier(connString string, log *slog.Logger) (*Notifier, error) {
	cfg, err := database.ParseConfig(connString) // keepalives, user timeout: a silent server is left
	if err != nil {
		return nil, fmt.Errorf("projector.NewNotifier: %w", err)
	}
	cfg.RuntimeParams["application_name"] = NotifyApplicationName
	if log == nil {
		log = slog.Default()
	}
	return &Notifier{cfg: cfg, log: log.With("component", "notifier"), signals: map[string]chan struct{}{}}, nil
}

// Run listens until ctx ends, reconnecting after any failure.
func (n *Notifier) Run(ctx context.Context) error {
	wait := 100 * time.Millisecond
	for {
		err := n.listen(ctx)
		if ctx.Err() != nil {
			return nil
		}
		n.log.Warn("notification connection lost, reconnecting", "wait", wait, "error", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
		if err == nil {
			wait = 100 * time.Millisecond
		}
	}
}

// listen runs one connection until it fails. It returns nil when the
// connection had been established (so the next attempt waits briefly).
func (n *Notifier) listen(ctx context.Context) error {
	connectCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := database.Connect(connectCtx, n.cfg)
	if err == nil {
		_, err = conn.Exec(connectCtx, "LISTEN "+NotifyChannel)
	}
	cancel()
	if err != nil {
		if conn != nil {
			closeQuietly(conn)
		}
		return fmt.Errorf("listen: %w", err)
	}
	defer closeQuietly(conn)
	n.log.Debug("listening", "channel", NotifyChannel)
	n.wakeAll()
	for {
		waitCtx, cancel := context.WithTimeout(ctx, listenQuiet)
		note, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && waitCtx.Err() != nil && !conn.IsClosed():
			// Quiet for listenQuiet: is the server still there? A
			// server that went silent (its machine frozen: its kernel
			// still acknowledges, so no TCP timeout fires) is left.
			if err := n.ping(ctx, conn); err != nil {
				n.log.Warn("notification connection silent; reconnecting", "error", err)
				return nil
			}
			n.wakeAll() // a notification that came with the ping's answer went unseen
			continue
		case err != nil:
			n.log.Warn("notification connection failed", "error", err)
			return nil
		}
		n.wake(note.Payload)
	}
}

// listenQuiet is how long the LISTEN session waits for a notification
// before it checks, within listenCheckTimeout, that its server answers:
// a silent server is left after at most their sum, and the session is
// opened again (on the new primary, after a failover).
const (
	listenQuiet        = 5 * time.Second
	listenCheckTimeout = 2 * time.Second
)

func (n *Notifier) ping(ctx context.Context, conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, listenCheckTimeout)
	defer cancel()
	return conn.Ping(ctx)
}

func closeQuietly(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// Signal returns the channel that the next notification for table closes
// (or the next reconnection): Changed for a table that is not a topic's.
// Writers of such a table announce it on NotifyChannel with its name
// (webhook deliveries do). Take the channel before looking for work, then
// wait on it, so that no notification in between is missed.
func (n *Notifier) Signal(table string) <-chan struct{} { return n.signal(table) }

// signal returns the channel that the next notification for table closes.
func (n *Notifier) signal(table string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.current(table)
}

// current is signal, n.mu held.
func (n *Notifier) current(table string) chan struct{} {
	ch, ok := n.signals[table]
	if !ok {
		ch = make(chan struct{})
		n.signals[table] = ch
	}
	return ch
}

// rearm returns the channel the next notification for table closes, and
// whether old, taken before, was closed meanwhile: under one lock with the
// notifications' wake, so that none falls between the look at old and the
// take of the next.
func (n *Notifier) rearm(table string, old <-chan struct{}) (next <-chan struct{}, notified bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-old:
		notified = true
	default:
	}
	return n.current(table), notified
}

// Changed returns a channel that the next notification for topic closes
// (as does every reconnection of the LISTEN connection). A reader takes it
// before it reads the topic, so that a notification sent during the read is
// not missed.
func (n *Notifier) Changed(topic string) <-chan struct{} { return n.signal(topicTable(topic)) }

// AnyChanged returns the channel that the next notification closes,
// whatever its topic, or the next (re)connection. The event feed's watcher
// waits on it: one LISTEN connection serves the projections and every long
// poll.
func (n *Notifier) AnyChanged() <-chan struct{} { return n.signal(anyTable) }

func (n *Notifier) wake(table string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.wakeLocked(table)
}

// wakeLocked is wake, n.mu held.
func (n *Notifier) wakeLocked(table string) {
	for _, key := range []string{table, anyTable} {
		if ch, ok := n.signals[key]; ok {
			close(ch)
			delete(n.signals, key)
		}
	}
}

func (n *Notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for table, ch := range n.signals {
		close(ch)
		delete(n.signals, table)
	}
}

// topicTable is the table name the trigger reports for topic (unquoted).
func topicTable(topic string) string {
	return strings.Trim(pubsub.Schema.MessagesTable(topic), `"`)
}

// Repoll is how a reader of a topic waits after a read that found
// nothing: for the topic's next notification, or the fallback interval
// (none comes while the LISTEN connection is down). A notification can
// arrive before its message is visible (watermill-sql reads only below
// pg_snapshot_xmin), so after one the reader reads again after 1, 2, 4 ...
// ms, never waiting longer than quickMax; so it does from the start, since
// a notification may have come before the reader existed. The
// subscribers' BackoffManager and the relay (adapters/pubsub/relay) wait
// through it, so the two cannot drift apart.
type Repoll struct {
	n        *Notifier
	table    string
	fallback time.Duration
	timer    Timer
	// seen is the signal current when the last read started; a
	// notification that came during the read has closed it already.
	seen <-chan struct{}
	// quick, when not zero, is a short wait for a re-read after a
	// notification found nothing visible yet; it doubles up to
	// min(fallback, quickMax).
	quick time.Duration
}

// Timer starts a Repoll's wait of d: c receives when it is over, stop
// ends it early. Real time (time.NewTimer) unless a test passes timers
// that it fires itself.
type Timer func(d time.Duration) (c <-chan time.Time, stop func() bool)

func realTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// NewRepoll returns the waits of a reader of topic, which reads next. The
// signal is taken now, before that read, so that no notification is
// missed. timer nil is real time.
func NewRepoll(n *Notifier, topic string, fallback time.Duration, timer Timer) *Repoll {
	if timer == nil {
		timer = realTimer
	}
	r := &Repoll{n: n, table: topicTable(topic), fallback: fallback, timer: timer, quick: time.Millisecond}
	r.arm()
	return r
}

// arm takes the signal current now: call it before each read.
func (r *Repoll) arm() { r.seen = r.n.signal(r.table) }

// Found is called after a read that found messages: there may be more,
// and the reader reads again at once; a later empty read waits for the
// fallback (or a notification). A notification that came during the read
// is not forgotten: its message may have committed after the read's
// snapshot and still be hidden from the next read (pg_snapshot_xmin), so
// that read, if empty, is followed by quick re-reads as after any
// notification, not by the fallback. So it is when the read reported
// committed messages it could not see yet (hidden: an older transaction
// still open, whose commit may send no notification at all).
func (r *Repoll) Found(hidden bool) {
	var notified bool
	r.seen, notified = r.n.rearm(r.table, r.seen)
	r.quick = 0
	if notified || hidden {
		r.quick = time.Millisecond
	}
}

// Wait waits, after a read that found nothing, until the topic's
// notification, the next quick re-read or the fallback, whichever comes
// first, and returns true for the reader to read again; false once done
// is closed.
func (r *Repoll) Wait(done <-chan struct{}) bool {
	over, stop := r.timer(r.nextWait())
	defer stop()
	ok := true
	select {
	case <-r.seen:
		r.quick = time.Millisecond
	case <-over:
	case <-done:
		ok = false
	}
	r.arm()
	return ok
}

// quickMax caps the re-reads after a notification. A notified message can
// stay invisible for as long as an older transaction anywhere in the
// cluster is open (watermill-sql reads only below pg_snapshot_xmin, which is
// cluster-wide), and without the cap the doubling would soon wait as long as
// the fallback, leaving a message known to be there unread until then.
const quickMax = time.Second

// nextWait is how long to wait after an empty read (unless a notification
// comes first): the fallback, or while a notification's message is not yet
// visible, the next quick re-read.
func (r *Repoll) nextWait() time.Duration {
	if r.quick == 0 {
		return r.fallback
	}
	wait := r.quick
	r.quick = min(r.quick*2, r.fallback, quickMax)
	return wait
}

// notifyBackoff is the BackoffManager of one subscriber: after an empty
// poll it waits through its Repoll. watermill-sql calls HandleError
// synchronously after every poll, so this changes the library's timing
// without forking it.
type notifyBackoff struct {
	wait *Repoll
	// read is what the poll that just ended saw (see lastRead), batch the
	// most messages a poll reads.
	read  *lastRead
	batch int
	retry time.Duration
	// done ends any wait: this subscription's context ended or the
	// subscriber is closing.
	done <-chan struct{}
}

func (b *notifyBackoff) HandleError(logger watermill.LoggerAdapter, noMsg bool, err error) time.Duration {
	switch {
	case err != nil && b.ending():
		// The router stops (shutdown, step-down): the query was cut short.
		logger.Debug("Query cut short, the subscription is ending", watermill.LogFields{"error": err.Error()})
		return b.retry
	case err != nil:
		logger.Error("Error querying for message", err, watermill.LogFields{"wait_time": b.retry})
		b.wait.arm()
		return b.retry
	case !noMsg:
		b.wait.Found(b.read.hidden)
		if b.wait.quick != 0 || !b.read.readAll(b.batch) {
			// There may be more (a full batch, a message left unacked, or a
			// notification or hidden messages since the read): poll again
			// at once.
			return 0
		}
		// The poll read all there was: a message committed since comes
		// with a notification on the signal Found took (one that came
		// during the poll had it poll again at once), or the fallback
		// finds it. Polling again at once would find nothing, at a round
		// trip per subscriber and wake-up.
	}
	b.wait.Wait(b.done)
	return 0
}

func (b *notifyBackoff) ending() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// lastRead is what a subscriber's current poll saw: whether one of its
// rows reported messages hidden behind it (pubsub.KeysetSchema.Hidden), how
// many rows it read and the offset of the last, and the offset it acked
// (watermill-sql acks once, at the end of a poll, the last message its
// handler acked). The subscriber's schema (readNoting) and offsets adapter
// (ackNoting) write it during the poll, and its BackoffManager reads it
// once the poll has ended; watermill-sql's consume loop does both, one
// after the other, on one goroutine.
type lastRead struct {
	hidden      bool
	rows        int
	last, acked int64
}

// readAll reports whether the poll read every message there was to read,
// of a batch of at most batch, and acked them all.
func (r *lastRead) readAll(batch int) bool {
	return r.rows > 0 && r.rows < batch && r.acked == r.last && !r.hidden
}

// readNoting is a subscriber's schema, noting what each poll saw in its
// lastRead.
type readNoting struct {
	wsql.SchemaAdapter
	read *lastRead
}

func (s readNoting) SelectQuery(topic, group string, offsets wsql.OffsetsAdapter) wsql.Query {
	*s.read = lastRead{}
	return s.SchemaAdapter.SelectQuery(topic, group, offsets)
}

func (s readNoting) UnmarshalMessage(row wsql.Scanner) (wsql.Row, error) {
	r, err := s.SchemaAdapter.UnmarshalMessage(row)
	if err == nil {
		hidden, _ := r.ExtraData[pubsub.HiddenKey].(bool)
		s.read.hidden = s.read.hidden || hidden
		s.read.rows++
		s.read.last = r.Offset
	}
	return r, err
}

// ackNoting is a subscriber's offsets adapter, noting what each poll acked
// in its lastRead.
type ackNoting struct {
	LockFreeOffsets
	read *lastRead
}

func (a ackNoting) AckMessageQuery(topic string, row wsql.Row, group string) wsql.Query {
	a.read.acked = row.Offset
	return a.LockFreeOffsets.AckMessageQuery(topic, row, group)
}

// SubscribersConfig is what NotifyingSubscribers needs.
type SubscribersConfig struct {
	// DB is the event store the subscribers read (*sql.DB). Required.
	DB DB
	// Notifier wakes an idle subscriber when its topic gets a message.
	// Required.
	Notifier *Notifier
	// Fallback is how often an idle subscriber polls all the same
	// (POLL_INTERVAL: a notification may come before its row is visible,
	// and none comes while the LISTEN connection is down). Required.
	Fallback time.Duration
	// Lookahead, when set, has the subscribers note what each query
	// returns (see Lookahead); the router's handlers must share it.
	// Optional.
	Lookahead *Lookahead
	// Log defaults to slog.Default().
	Log *slog.Logger
}

// NotifyingSubscribers is SQLSubscribers with wake-up on notification: an
// idle subscriber polls when cfg.Notifier reports its topic, and at least
// every cfg.Fallback. The offsets adapter does not lock the consumer
// group's row (see LockFreeOffsets), so a subscriber whose handler is
// retrying holds no transaction id and does not delay the other topics. A
// cfg without its required fields makes no subscriber: the returned
// function says which are missing.
func NotifyingSubscribers(cfg SubscribersConfig) func(consumerGroup string) (message.Subscriber, error) {
	if cfg.DB == nil || cfg.Notifier == nil || cfg.Fallback <= 0 {
		return func(string) (message.Subscriber, error) {
			return nil, errors.New("projector.NotifyingSubscribers: DB, Notifier and a positive Fallback are required")
		}
	}
	db, n, fallback, ahead := cfg.DB, cfg.Notifier, cfg.Fallback, cfg.Lookahead
	wlog := watermill.NewSlogLogger(cmp.Or(cfg.Log, slog.Default()).With("component", "subscriber"))
	return func(group string) (message.Subscriber, error) {
		keyset := pubsub.KeysetSchema{DefaultPostgreSQLSchema: pubsub.Schema, Hidden: true}
		var schema wsql.SchemaAdapter = keyset
		if ahead != nil {
			schema = ahead.schema(group, keyset)
		}
		return &topicSubscriber{make: func(topic string, done <-chan struct{}) (message.Subscriber, error) {
			deadline := AckDeadline
			read := &lastRead{}
			return wsql.NewSubscriber(autocommitPolls{db}, wsql.SubscriberConfig{
				ConsumerGroup:  group,
				AckDeadline:    &deadline,
				ResendInterval: 200 * time.Millisecond,
				BackoffManager: &notifyBackoff{wait: NewRepoll(n, topic, fallback, nil), read: read, batch: keyset.BatchSize(), retry: time.Second, done: done},
				SchemaAdapter:  readNoting{SchemaAdapter: schema, read: read},
				OffsetsAdapter: ackNoting{read: read},
			}, wlog)
		}}, nil
	}
}

// DB is the database a subscriber reads: *sql.DB.
type DB = wsql.Beginner

// autocommitPolls is a subscriber's database, whose polls begin no
// transaction (database.Autocommit; on a pool package database did not
// open, they are transactions as before). watermill-sql runs each poll in a
// repeatable-read transaction: the select of a batch, the handlers, then
// the upsert of the group's offset. Neither statement needs the other:
// the select is one statement, and LockFreeOffsets' upsert never moves the
// offset back, whoever acked meanwhile. So a poll saves BEGIN's and
// COMMIT's round trips, and while a handler applies its message (or sleeps
// through its retries) the poll's session waits idle, not in a transaction
// whose snapshot holds back vacuum on the whole server and which an
// operator's idle_in_transaction_session_timeout would cut.
//
// Only BeginTx is marked: the statements and the messages' contexts
// (which the handlers begin their own transactions on) are not.
type autocommitPolls struct{ DB }

func (p autocommitPolls) BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error) {
	return p.DB.BeginTx(database.Autocommit(ctx), opts)
}

// topicSubscriber makes a watermill-sql subscriber for each subscription,
// once it learns the topic, so that the BackoffManager waits for that topic
// only.
type topicSubscriber struct {
	make   func(topic string, done <-chan struct{}) (message.Subscriber, error)
	mu     sync.Mutex
	closed bool
	subs   []subscription
}

// subscription is one Subscribe: its watermill-sql subscriber, and the end
// of its BackoffManager's waits.
type subscription struct {
	sub message.Subscriber
	// end closes the done channel of the subscription's BackoffManager,
	// once.
	end func()
	// stop unregisters the call of end when the subscription's context
	// ends.
	stop func() bool
	// out is what the subscriber delivers on (nil until Subscribe
	// returned it).
	out <-chan *message.Message
}

func (s *topicSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	done := make(chan struct{})
	end := sync.OnceFunc(func() { close(done) })
	sub, err := s.make(topic, done)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, wsql.ErrSubscriberClosed
	}
	// The router cancels ctx before it closes subscribers: end the waits
	// of this subscription's BackoffManager then, or its consume loop would
	// notice only after the fallback interval. AfterFunc starts no
	// goroutine until ctx ends; Close stops it.
	s.subs = append(s.subs, subscription{sub: sub, end: end, stop: context.AfterFunc(ctx, end)})
	i := len(s.subs) - 1
	s.mu.Unlock()
	out, err := sub.Subscribe(ctx, topic)
	if err == nil {
		s.mu.Lock()
		s.subs[i].out = out
		s.mu.Unlock()
	}
	return out, err
}

func (s *topicSubscriber) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var errs []error
	for _, sub := range s.subs {
		sub.stop()
		sub.end()
		errs = append(errs, sub.sub.Close())
		// watermill-sql's Close returns once its consume loop has
		// ended, a moment before that loop's goroutine closes the
		// channel: Watermill's contract (and the router) wants it closed
		// when Close returns. Nothing is sent on it any more, so this
		// only waits for the close.
		if sub.out != nil {
			for range sub.out {
			}
		}
	}
	return errors.Join(errs...)
}

// LockFreeOffsets is watermill-sql's Postgres offsets adapter without the
// FOR UPDATE on the consumer group's row. With the lock, every poll's
// transaction gets a transaction id at once and keeps it while the handler
// runs, so a handler sleeping in its retry budget holds back
// pg_snapshot_xmin, and with it every topic of the server. Without it, the
// transaction has no id until it writes the offset at the end of the batch.
//
// The lock only guarded against two subscribers of one consumer group
// running at once. Hearth runs subscribers only on the leader, and its
// projections are idempotent (version guard), so a redelivery after an
// overlap changes nothing.
type LockFreeOffsets struct {
	wsql.DefaultPostgreSQLOffsetsAdapter
}

// AckMessageQuery stores the group's position, unless the stored one is
// already past it. Without the lock a stale leader's subscriber (or its
// catch-up) can ack after the new leader has moved on; storing its older
// position would not only redeliver (which the version guard ignores): once
// retention has pruned past it, the group would look as if it had missed
// pruned messages, and every term would end on a TopicGapError.
func (a LockFreeOffsets) AckMessageQuery(topic string, row wsql.Row, consumerGroup string) wsql.Query {
	return wsql.Query{
		Query: `INSERT INTO ` + a.MessagesOffsetsTable(topic) + ` AS stored (offset_acked, last_processed_transaction_id, consumer_group)
			VALUES ($1, $2, $3)
			ON CONFLICT (consumer_group) DO UPDATE
			SET offset_acked = excluded.offset_acked, last_processed_transaction_id = excluded.last_processed_transaction_id
			WHERE (excluded.last_processed_transaction_id, excluded.offset_acked) > (stored.last_processed_transaction_id, stored.offset_acked)
			   OR stored.offset_acked IS NULL`,
		Args: []any{row.Offset, row.ExtraData["transaction_id"], consumerGroup},
	}
}

// NextOffsetQuery reads the group's offset without locking it.
func (a LockFreeOffsets) NextOffsetQuery(topic, consumerGroup string) wsql.Query {
	return wsql.Query{
		Query: `SELECT offset_acked, last_processed_transaction_id FROM ` + a.MessagesOffsetsTable(topic) + ` WHERE consumer_group = $1`,
		Args:  []any{consumerGroup},
	}
}
