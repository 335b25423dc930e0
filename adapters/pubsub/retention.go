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
	"time"

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
// adapter, without locking it: a stale leader's subscriber may store an
// older position after a newer one, which only makes retention keep more
// until the next ack; a row already deleted would have been a redelivery,
// which the projections ignore (version guard).
//
// A group with no row yet (a projection that never ran) has acknowledged
// nothing: a topic is not pruned until each of its required groups has a
// row. A group's row that no one advances any more (a projection removed,
// an experiment) holds the topic back for ever: delete that row
// (docs/operations.md, "Retention").
type Retention struct {
	db     *sql.DB
	topics []RetainedTopic
	keep   time.Duration
	batch  int
	log    *slog.Logger
	pruned *prometheus.CounterVec
}

// RetainedTopic is a topic and the consumer groups that must have
// acknowledged a message before it goes; every other group found in the
// topic's offsets table counts too.
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
	// Registry, when set, gets hearth_topic_pruned_messages_total.
	Registry prometheus.Registerer
}

// NewRetention checks cfg.
func NewRetention(cfg RetentionConfig) (*Retention, error) {
	if cfg.DB == nil || len(cfg.Topics) == 0 || cfg.Keep <= 0 || cfg.Batch <= 0 {
		return nil, errors.New("pubsub.NewRetention: DB, Topics, Keep and Batch are required")
	}
	r := &Retention{db: cfg.DB, topics: cfg.Topics, keep: cfg.Keep, batch: cfg.Batch,
		log: cmp.Or(cfg.Log, slog.Default()).With("component", "retention")}
	if cfg.Registry != nil {
		r.pruned = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hearth_topic_pruned_messages_total",
			Help: "Messages deleted from a topic table by retention (acknowledged by every consumer group and older than TOPIC_RETENTION).",
		}, []string{"topic"})
		if err := cfg.Registry.Register(r.pruned); err != nil {
			return nil, fmt.Errorf("register retention metrics: %w", err)
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
	var after *position // the last row deleted: each batch starts past it, not over the dead rows before
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

// position is a message's place in delivery order.
type position struct {
	tx     uint64 // transaction_id
	offset int64
}

func (p position) less(q position) bool {
	return p.tx < q.tx || (p.tx == q.tx && p.offset < q.offset)
}

// bound returns the position before which every row may go: the smallest
// acknowledged position of the topic's consumer groups (the row at it
// included), or the first row younger than Keep in delivery order,
// whichever comes first. Every row before that first young row is old by
// definition, so the batches are ranges of the primary key. ok is false
// when nothing may go.
func (r *Retention) bound(ctx context.Context, t RetainedTopic) (bound position, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := r.db.QueryContext(ctx, `SELECT consumer_group, coalesce(offset_acked, 0), last_processed_transaction_id::text FROM `+
		Offsets.MessagesOffsetsTable(t.Topic))
	if err != nil {
		return position{}, false, fmt.Errorf("read offsets of %s: %w", t.Topic, err)
	}
	defer rows.Close()
	acked := map[string]position{}
	for rows.Next() {
		var group, tx string
		var p position
		if err := rows.Scan(&group, &p.offset, &tx); err != nil {
			return position{}, false, fmt.Errorf("read offsets of %s: %w", t.Topic, err)
		}
		if p.tx, err = strconv.ParseUint(tx, 10, 64); err != nil {
			return position{}, false, fmt.Errorf("offsets of %s: transaction id %q: %w", t.Topic, tx, err)
		}
		acked[group] = p
	}
	if err := rows.Err(); err != nil {
		return position{}, false, fmt.Errorf("read offsets of %s: %w", t.Topic, err)
	}
	for _, g := range t.Groups {
		if _, found := acked[g]; !found {
			return position{}, false, nil // it has acknowledged nothing yet
		}
	}
	if len(acked) == 0 {
		return position{}, false, nil
	}
	first := true
	for _, p := range acked {
		if first || p.less(bound) {
			bound, first = p, false
		}
	}
	bound.offset++ // the acknowledged row itself goes too
	var tx string
	var young position
	err = r.db.QueryRowContext(ctx, `SELECT transaction_id::text, "offset" FROM `+Schema.MessagesTable(t.Topic)+`
		WHERE (transaction_id, "offset") < ($1::text::xid8, $2::bigint)
		  AND created_at >= (now() - $3::bigint * interval '1 millisecond')::timestamp
		ORDER BY transaction_id, "offset" LIMIT 1`, strconv.FormatUint(bound.tx, 10), bound.offset, r.keep.Milliseconds()).
		Scan(&tx, &young.offset)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return position{}, false, fmt.Errorf("first young message of %s: %w", t.Topic, err)
	default:
		if young.tx, err = strconv.ParseUint(tx, 10, 64); err != nil {
			return position{}, false, fmt.Errorf("%s: transaction id %q: %w", t.Topic, tx, err)
		}
		bound = young
	}
	return bound, true, nil
}

// deleteBatch deletes up to Batch rows of topic after after (nil: from the
// start) and before bound, oldest first, skipping rows another pruner has
// locked; it returns how many it deleted and the last of them.
func (r *Retention) deleteBatch(ctx context.Context, topic string, after *position, bound position) (int, position, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	table := Schema.MessagesTable(topic)
	args := []any{strconv.FormatUint(bound.tx, 10), bound.offset, r.batch}
	var from strings.Builder
	if after != nil {
		from.WriteString(` AND (transaction_id, "offset") > ($4::text::xid8, $5::bigint)`)
		args = append(args, strconv.FormatUint(after.tx, 10), after.offset)
	}
	rows, err := r.db.QueryContext(ctx, `DELETE FROM `+table+` WHERE ctid = ANY (ARRAY(
			SELECT ctid FROM `+table+`
			WHERE (transaction_id, "offset") < ($1::text::xid8, $2::bigint)`+from.String()+`
			ORDER BY transaction_id, "offset" LIMIT $3 FOR UPDATE SKIP LOCKED))
		RETURNING transaction_id::text, "offset"`, args...)
	if err != nil {
		return 0, position{}, fmt.Errorf("prune %s: %w", topic, err)
	}
	defer rows.Close()
	n, last := 0, position{}
	for rows.Next() {
		var tx string
		var p position
		if err := rows.Scan(&tx, &p.offset); err != nil {
			return n, last, fmt.Errorf("prune %s: %w", topic, err)
		}
		if p.tx, err = strconv.ParseUint(tx, 10, 64); err != nil {
			return n, last, fmt.Errorf("prune %s: transaction id %q: %w", topic, tx, err)
		}
		if n == 0 || last.less(p) {
			last = p
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, last, fmt.Errorf("prune %s: %w", topic, err)
	}
	return n, last, nil
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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, topic := range c.topics {
		table := Schema.MessagesTable(topic)
		var rows, bytes int64
		var age float64
		err := c.db.QueryRowContext(ctx, `SELECT
				coalesce((SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = $1::regclass), 0),
				pg_total_relation_size($1::regclass),
				coalesce((SELECT EXTRACT(EPOCH FROM now()::timestamp - created_at)::float8 FROM `+table+`
					ORDER BY transaction_id, "offset" LIMIT 1), 0)`, table).Scan(&rows, &bytes, &age)
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
