package pubsub

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/prometheus/client_golang/prometheus"
)

// Retention prunes the Watermill topic tables. The events table is the
// source of truth (verify and rebuild read it, never a topic); a topic row
// only carries an event to its subscribers, so once every consumer group
// has acknowledged it, it is needed by no one, and after Keep it is
// deleted, a batch at a time.
//
// What "acknowledged" means comes from watermill-sql v3's Postgres
// adapters: a subscriber reads rows ordered by (transaction_id, "offset")
// and only below pg_snapshot_xmin, so when it stores offset_acked O and
// last_processed_transaction_id T, every transaction with an id below T
// had ended, and the group has been handed every row up to (T, O) in that
// order. The offset alone is not an order: offsets are taken at insert,
// transactions commit in another order, so a row with a larger offset may
// come before one with a smaller. Retention therefore compares positions
// (transaction_id, "offset"), as the subscriber does, and deletes only rows
// at or before the smallest position stored by any consumer group of the
// topic. Hearth's LockFreeOffsets writes the same row as the default
// adapter, without locking it, and never moves it back: a stale leader's
// subscriber that acks an older position after a newer one leaves the
// newer one, so a group never looks as if it had missed what retention
// deleted behind it.
//
// The groups come from the database, not from the settings of the worker
// that prunes: every group with a row in the topic's offsets table counts
// (a consumer writes its row before it reads: watermill-sql's subscribers
// and the catch-up their zero offset, the relay its position), and a
// required group (RetainedTopic.Groups: the consumers every Hearth process
// runs) with no row yet holds the whole topic. A group's row that no one
// advances any more (the relay turned off for good, a projection removed)
// holds the topic back for ever: retention logs which group holds it
// (hearth_topic_retention_held_by), and the operator deletes that row
// (docs/operations.md, "Retention").
//
// The statement that deletes also records the last message it deleted
// (table topic_pruned). A consumer whose position is before that mark
// meets a gap (messages it never consumed are gone: a group that wrote its
// row too late, or whose row was deleted while it was still needed);
// CheckGap finds it and the consumers stop there with a *TopicGapError.
type Retention struct {
	db     *sql.DB
	topics []RetainedTopic
	keep   time.Duration
	batch  int
	log    *slog.Logger
	pruned *prometheus.CounterVec
	heldBy *prometheus.GaugeVec

	mu      sync.Mutex
	holders map[string]string // by topic: the group last found holding it back
}

// RetainedTopic is a topic and the consumer groups that must have a
// position before anything goes (the consumers every Hearth process runs,
// whatever its settings); every group found in the topic's offsets table
// counts too.
type RetainedTopic struct {
	Topic  string
	Groups []string
}

// RetentionConfig is what NewRetention needs.
type RetentionConfig struct {
	// DB is the event-store database. Required.
	DB *sql.DB
	// Topics are the topics to prune. Required.
	Topics []RetainedTopic
	// Keep is how long an acknowledged message is kept. Required: its one
	// default is the configuration's (cmd/app Config.TopicRetention,
	// TOPIC_RETENTION).
	Keep time.Duration
	// Batch is how many rows one statement deletes at most. Required.
	Batch int
	// Log defaults to slog.Default().
	Log *slog.Logger
	// Registry, when set, gets hearth_topic_pruned_messages_total and
	// hearth_topic_retention_held_by.
	Registry prometheus.Registerer
}

// NewRetention checks cfg.
func NewRetention(cfg RetentionConfig) (*Retention, error) {
	if cfg.DB == nil || len(cfg.Topics) == 0 || cfg.Keep <= 0 || cfg.Batch <= 0 {
		return nil, errors.New("pubsub.NewRetention: DB, Topics, Keep and Batch are required")
	}
	r := &Retention{db: cfg.DB, topics: cfg.Topics, keep: cfg.Keep, batch: cfg.Batch,
		log: cmp.Or(cfg.Log, slog.Default()).With("component", "retention"), holders: map[string]string{}}
	if cfg.Registry != nil {
		r.pruned = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hearth_topic_pruned_messages_total",
			Help: "Messages deleted from a topic table by retention (acknowledged by every consumer group and older than TOPIC_RETENTION).",
		}, []string{"topic"})
		r.heldBy = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hearth_topic_retention_held_by",
			Help: "1 for the consumer group that keeps messages older than TOPIC_RETENTION in a topic table (no position yet, or not past them); absent when none does.",
		}, []string{"topic", "group"})
		for _, c := range []prometheus.Collector{r.pruned, r.heldBy} {
			if err := cfg.Registry.Register(c); err != nil {
				return nil, fmt.Errorf("register retention metrics: %w", err)
			}
		}
	}
	return r, nil
}

// Run prunes every topic now and then every interval, until ctx ends.
// Errors are logged and the loop goes on.
func (r *Retention) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := r.PruneAll(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("prune topics", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// PruneAll prunes every topic of the retention and returns how many
// messages it deleted in all.
func (r *Retention) PruneAll(ctx context.Context) (int, error) {
	total := 0
	var errs []error
	for _, topic := range r.topics {
		n, err := r.Prune(ctx, topic)
		total += n
		if err != nil {
			errs = append(errs, err)
		}
		if n > 0 {
			r.log.Debug("pruned topic", "topic", topic.Topic, "messages", n)
		}
	}
	return total, errors.Join(errs...)
}

// Prune deletes what retention allows from one topic, in statements of at
// most Batch rows, and returns how many rows it deleted.
func (r *Retention) Prune(ctx context.Context, t RetainedTopic) (int, error) {
	bound, ok, err := r.bound(ctx, t)
	if err != nil || !ok {
		return 0, err
	}
	total := 0
	var after *Position // the last row deleted: each batch starts past it, not over the dead rows before
	for {
		n, last, err := r.deleteBatch(ctx, t.Topic, after, bound)
		total += n
		if n > 0 && r.pruned != nil {
			r.pruned.WithLabelValues(t.Topic).Add(float64(n))
		}
		if err != nil || n < r.batch {
			return total, err
		}
		after = &last
	}
}

// Position is a message's place in delivery order.
type Position struct {
	TransactionID uint64 // transaction_id
	Offset        int64
}

func (p Position) less(q Position) bool {
	return p.TransactionID < q.TransactionID || (p.TransactionID == q.TransactionID && p.Offset < q.Offset)
}

func (p Position) String() string {
	return fmt.Sprintf("(transaction %d, offset %d)", p.TransactionID, p.Offset)
}

// bound returns the position before which every row may go: the smallest
// acknowledged position of the topic's consumer groups (the row at it
// included), or the first row younger than Keep in delivery order,
// whichever comes first. Every row before that first young row is old by
// definition, so the batches are ranges of the primary key. ok is false
// when nothing may go. It notes the group that keeps messages older than
// Keep, if one does (see held).
func (r *Retention) bound(ctx context.Context, t RetainedTopic) (bound Position, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	acked, err := r.acked(ctx, t.Topic)
	if err != nil {
		return Position{}, false, err
	}
	for _, g := range t.Groups {
		if _, found := acked[g]; !found { // it has acknowledged nothing yet
			return Position{}, false, r.held(ctx, t.Topic, g, nil)
		}
	}
	holder := ""
	for g, p := range acked {
		if holder == "" || p.less(bound) || (p == bound && g < holder) {
			bound, holder = p, g
		}
	}
	if holder == "" {
		return Position{}, false, r.held(ctx, t.Topic, "", nil)
	}
	at := bound
	bound.Offset++ // the acknowledged row itself goes too
	var tx string
	var young Position
	// ORDER BY names the table's columns (m.): a bare transaction_id would be
	// the text output column, ordered as text (999 after 1000).
	err = r.db.QueryRowContext(ctx, `SELECT m.transaction_id::text, m."offset" FROM `+Schema.MessagesTable(t.Topic)+` m
		WHERE (m.transaction_id, m."offset") < ($1::text::xid8, $2::bigint)
		  AND m.created_at >= (now() - $3::bigint * interval '1 millisecond')::timestamp
		ORDER BY m.transaction_id, m."offset" LIMIT 1`, strconv.FormatUint(bound.TransactionID, 10), bound.Offset, r.keep.Milliseconds()).
		Scan(&tx, &young.Offset)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// The group is the limit: it holds back what follows its position.
		return bound, true, r.held(ctx, t.Topic, holder, &at)
	case err != nil:
		return Position{}, false, fmt.Errorf("first young message of %s: %w", t.Topic, err)
	}
	if young.TransactionID, err = strconv.ParseUint(tx, 10, 64); err != nil {
		return Position{}, false, fmt.Errorf("%s: transaction id %q: %w", t.Topic, tx, err)
	}
	return young, true, r.held(ctx, t.Topic, "", nil)
}

// acked reads the position of every consumer group of topic.
func (r *Retention) acked(ctx context.Context, topic string) (map[string]Position, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT consumer_group, coalesce(offset_acked, 0), last_processed_transaction_id::text FROM `+
		Offsets.MessagesOffsetsTable(topic))
	if err != nil {
		return nil, fmt.Errorf("read offsets of %s: %w", topic, err)
	}
	defer rows.Close()
	acked := map[string]Position{}
	for rows.Next() {
		var group, tx string
		var p Position
		if err := rows.Scan(&group, &p.Offset, &tx); err != nil {
			return nil, fmt.Errorf("read offsets of %s: %w", topic, err)
		}
		if p.TransactionID, err = strconv.ParseUint(tx, 10, 64); err != nil {
			return nil, fmt.Errorf("offsets of %s: transaction id %q: %w", topic, tx, err)
		}
		acked[group] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read offsets of %s: %w", topic, err)
	}
	return acked, nil
}

// held notes whether group (at position at, nil when it has none; ""
// for no group) keeps messages of topic older than Keep: when the first
// message after its position is. It sets hearth_topic_retention_held_by
// and logs each change, so that an operator learns which group to look
// at (a consumer that is behind or stopped, or a retired group whose row
// should go).
func (r *Retention) held(ctx context.Context, topic, group string, at *Position) error {
	if group != "" {
		from := cmp.Or(at, &Position{})
		var old bool
		err := r.db.QueryRowContext(ctx, `SELECT coalesce((SELECT created_at < (now() - $3::bigint * interval '1 millisecond')::timestamp
			FROM `+Schema.MessagesTable(topic)+` WHERE (transaction_id, "offset") > ($1::text::xid8, $2::bigint)
			ORDER BY transaction_id, "offset" LIMIT 1), false)`,
			strconv.FormatUint(from.TransactionID, 10), from.Offset, r.keep.Milliseconds()).Scan(&old)
		if err != nil {
			return fmt.Errorf("oldest message %s keeps in %s: %w", group, topic, err)
		}
		if !old {
			group = ""
		}
	}
	r.mu.Lock()
	before := r.holders[topic]
	r.holders[topic] = group
	r.mu.Unlock()
	if r.heldBy != nil {
		r.heldBy.DeletePartialMatch(prometheus.Labels{"topic": topic})
		if group != "" {
			r.heldBy.WithLabelValues(topic, group).Set(1)
		}
	}
	switch {
	case group != "" && group != before:
		position := "none: it has consumed nothing yet"
		if at != nil {
			position = at.String()
		}
		r.log.Warn("a consumer group holds the topic back: messages older than TOPIC_RETENTION stay until it consumes them (or, if the group is retired, its row in the offsets table is deleted)",
			"topic", topic, "group", group, "position", position, "offsets_table", strings.Trim(Offsets.MessagesOffsetsTable(topic), `"`))
	case group == "" && before != "":
		r.log.Info("the consumer group no longer holds the topic back", "topic", topic, "group", before)
	}
	return nil
}

// deleteBatch deletes up to Batch rows of topic after after (nil: from the
// start) and before bound, oldest first, skipping rows another pruner has
// locked, and moves the topic's mark in topic_pruned up to the last of them
// in the same statement; it returns how many it deleted and the last.
func (r *Retention) deleteBatch(ctx context.Context, topic string, after *Position, bound Position) (int, Position, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	table := Schema.MessagesTable(topic)
	args := []any{strconv.FormatUint(bound.TransactionID, 10), bound.Offset, r.batch, topic}
	var from strings.Builder
	if after != nil {
		from.WriteString(` AND (transaction_id, "offset") > ($5::text::xid8, $6::bigint)`)
		args = append(args, strconv.FormatUint(after.TransactionID, 10), after.Offset)
	}
	var n int
	var tx sql.NullString
	var offset sql.NullInt64
	err := r.db.QueryRowContext(ctx, `WITH gone AS (
			DELETE FROM `+table+` WHERE ctid = ANY (ARRAY(
				SELECT ctid FROM `+table+`
				WHERE (transaction_id, "offset") < ($1::text::xid8, $2::bigint)`+from.String()+`
				ORDER BY transaction_id, "offset" LIMIT $3 FOR UPDATE SKIP LOCKED))
			RETURNING transaction_id, "offset"),
		last AS (SELECT transaction_id, "offset" FROM gone ORDER BY transaction_id DESC, "offset" DESC LIMIT 1),
		mark AS (
			INSERT INTO topic_pruned AS p (topic, transaction_id, "offset") SELECT $4, transaction_id, "offset" FROM last
			ON CONFLICT (topic) DO UPDATE SET transaction_id = excluded.transaction_id, "offset" = excluded."offset", pruned_at = now()
			WHERE (p.transaction_id, p."offset") < (excluded.transaction_id, excluded."offset"))
		SELECT (SELECT count(*) FROM gone), (SELECT transaction_id::text FROM last), (SELECT "offset" FROM last)`, args...).
		Scan(&n, &tx, &offset)
	if err != nil {
		return 0, Position{}, fmt.Errorf("prune %s: %w", topic, err)
	}
	if n == 0 {
		return 0, Position{}, nil
	}
	last := Position{Offset: offset.Int64}
	if last.TransactionID, err = strconv.ParseUint(tx.String, 10, 64); err != nil {
		return n, last, fmt.Errorf("prune %s: transaction id %q: %w", topic, tx.String, err)
	}
	return n, last, nil
}

// TopicGapError is a consumer group that meets a gap: messages of its
// topic that it has not consumed were deleted by retention (it wrote its
// position too late, or its row was deleted while it was still needed).
// The consumer stops there rather than skip them.
type TopicGapError struct {
	Topic, Group string
	// After is the group's position; Through is the last message retention
	// deleted. What the group had not consumed up to Through is gone.
	After, Through Position
}

func (e *TopicGapError) Error() string {
	return fmt.Sprintf("topic %s, consumer group %s: the messages after %s up to %s were pruned before the group consumed them; "+
		"it stops rather than skip them; to go on without them, move the group's position to %s (docs/operations.md, Retention)",
		e.Topic, e.Group, e.After, e.Through, e.Through)
}

// CheckGap returns a *TopicGapError when retention has deleted messages of
// topic after group's position, which next reads (an offsets adapter's
// NextOffsetQuery, as the read used). A consumer calls it after each read:
// whatever retention deleted before the read is then seen, since the
// deletion and its mark commit together.
func CheckGap(ctx context.Context, db *sql.DB, topic, group string, next wsql.Query) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var after, through string
	var afterOffset, throughOffset int64
	err := db.QueryRowContext(ctx, `WITH last_processed AS (`+next.Query+`)
		SELECT coalesce(l.last_processed_transaction_id, '0')::text, coalesce(l.offset_acked, 0), p.transaction_id::text, p."offset"
		FROM topic_pruned p LEFT JOIN last_processed l ON true
		WHERE p.topic = $`+strconv.Itoa(len(next.Args)+1)+`
		  AND (p.transaction_id, p."offset") > (coalesce(l.last_processed_transaction_id, '0'), coalesce(l.offset_acked, 0))`,
		append(slices.Clone(next.Args), topic)...).Scan(&after, &afterOffset, &through, &throughOffset)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("check %s of %s for a gap: %w", group, topic, err)
	}
	gap := &TopicGapError{Topic: topic, Group: group, After: Position{Offset: afterOffset}, Through: Position{Offset: throughOffset}}
	if gap.After.TransactionID, err = strconv.ParseUint(after, 10, 64); err != nil {
		return fmt.Errorf("check %s of %s for a gap: transaction id %q: %w", group, topic, after, err)
	}
	if gap.Through.TransactionID, err = strconv.ParseUint(through, 10, 64); err != nil {
		return fmt.Errorf("check %s of %s for a gap: transaction id %q: %w", group, topic, through, err)
	}
	return gap
}

// TopicStats reads, on each scrape, the size of every topic table: rows
// (Postgres' live-tuple count, which the statistics collector keeps without
// a scan), bytes (table, indexes and TOAST) and the age of the first
// message still stored, in delivery order: about TOPIC_RETENTION when
// retention keeps up, more when a consumer group holds it back.
type TopicStats struct {
	db     *sql.DB
	topics []string
	log    *slog.Logger

	rows, bytes, age *prometheus.Desc
}

// NewTopicStats returns a collector of the topic tables' sizes, read from
// the event-store database on each scrape.
func NewTopicStats(db *sql.DB, log *slog.Logger, topics ...string) *TopicStats {
	l := []string{"topic"}
	return &TopicStats{db: db, topics: topics, log: cmp.Or(log, slog.Default()).With("component", "metrics"),
		rows:  prometheus.NewDesc("hearth_topic_messages", "Messages stored in a topic table (Postgres' live-tuple estimate).", l, nil),
		bytes: prometheus.NewDesc("hearth_topic_bytes", "Size of a topic table with its indexes and TOAST, in bytes.", l, nil),
		age:   prometheus.NewDesc("hearth_topic_oldest_message_age_seconds", "Age of the first message a topic table still stores, in delivery order (0 when empty).", l, nil),
	}
}

func (c *TopicStats) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.rows
	ch <- c.bytes
	ch <- c.age
}

func (c *TopicStats) Collect(ch chan<- prometheus.Metric) {
	// The round is bounded as a whole too, below Prometheus' default
	// scrape_timeout (10 s), as the projections' stats are
	// (projector.StatsRound, which this package cannot import).
	round, stop := context.WithTimeout(context.Background(), 8*time.Second)
	defer stop()
	for _, topic := range c.topics {
		table := Schema.MessagesTable(topic)
		var rows, bytes int64
		var age float64
		// Each topic's read has its own time: one that waits (its table
		// locked by a VACUUM FULL) leaves out only that topic.
		ctx, cancel := context.WithTimeout(round, 3*time.Second)
		err := c.db.QueryRowContext(ctx, `SELECT
				coalesce((SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = $1::regclass), 0),
				pg_total_relation_size($1::regclass),
				coalesce((SELECT EXTRACT(EPOCH FROM now()::timestamp - created_at)::float8 FROM `+table+`
					ORDER BY transaction_id, "offset" LIMIT 1), 0)`, table).Scan(&rows, &bytes, &age)
		cancel()
		if err != nil {
			c.log.Warn("topic size unavailable", "topic", topic, "error", err)
			ch <- prometheus.NewInvalidMetric(c.rows, err)
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.rows, prometheus.GaugeValue, float64(rows), topic)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(bytes), topic)
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, max(age, 0), topic)
	}
}
