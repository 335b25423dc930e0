package projector

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"hearth/adapters/pubsub"
	"hearth/domain/event"
	"hearth/internal/tracing"
)

// CatchUpPageSize is how many events one catch-up page applies in one
// read-model transaction. Every consumer holds a page's rows, its decoded
// events and its statements' parameters at once: with larger pages a
// catch-up's heap neared the process's memory limit, and the collector's
// work grew faster than the transactions saved (make bench, catch-up
// rows).
const CatchUpPageSize = 500

// CatchUp brings a projection up to date before its live subscriber starts.
// Watermill hands messages over one at a time and waits for each ack, so a
// backlog costs a read-model transaction per event. CatchUp reads the topic
// table itself, with the subscribers' query (pubsub.KeysetSchema: the same
// order, the same pg_snapshot_xmin rule, the consumer group's offset), a
// page at a time; applies each page with Projection.ApplyBatch in one
// read-model transaction (version guard, gap check and change log
// unchanged); and only
// then moves the group's offset past the page: in the same transaction
// when the read model shares the event store's database, right after the
// commit otherwise (a crash in between redelivers the page, which the
// version guard ignores). It never acks work that is not durable.
//
// It stops when a page is not full (the live subscriber takes over from
// there) or at the first page that fails (a gap, a bad payload, a database
// error): that page is rolled back and left to the live subscriber, whose
// retries and poison queue deal with it event by event. Messages of the
// topic that retention deleted before the group consumed them (ReadAfter's
// check) are an error instead: the term stops there, saying so.
type CatchUp struct {
	// DB is the event-store database.
	DB *sql.DB
	// SameDB reports that the read model lives in DB's database.
	SameDB bool
	// PageSize defaults to CatchUpPageSize.
	PageSize int
	// Log defaults to slog.Default().
	Log *slog.Logger
	// Tracer gives each page a span, in the trace of its first event's
	// write and linked to the others' (see pageSpan). Optional.
	Tracer trace.Tracer
	// Pages shares the pages read with the process's other consumers of
	// the topic (see Pages). Optional.
	Pages *Pages
	// Skips are the events skipped in each projection, applied as
	// skipped (see Skips). Nil: none is.
	Skips *Skips
}

// Run catches p up and returns how many events it read.
func (c CatchUp) Run(ctx context.Context, p Projection) (int, error) {
	if p.ApplyBatch == nil {
		return 0, nil
	}
	log := cmp.Or(c.Log, slog.Default()).With("component", "catch_up", "projection", p.Name)
	schema := wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: cmp.Or(c.PageSize, CatchUpPageSize)}
	offsets := LockFreeOffsets{}
	for _, q := range offsets.BeforeSubscribingQueries(p.Topic, p.Name) {
		if err := c.exec(ctx, c.DB, q); err != nil {
			return 0, fmt.Errorf("catch up %s: initialise offset: %w", p.Name, err)
		}
	}
	defer c.Pages.Join(p.Topic, p.Name)()
	pos, err := position(ctx, c.DB, p.Topic, p.Name)
	if err != nil {
		return 0, fmt.Errorf("catch up %s: %w", p.Name, err)
	}
	start, total := time.Now(), 0
	for {
		rows, err := ReadAfter(ctx, c.DB, c.Pages, p.Topic, p.Name, pos, schema.SubscribeBatchSize)
		if err != nil {
			return total, fmt.Errorf("catch up %s: %w", p.Name, err)
		}
		if len(rows) == 0 {
			break
		}
		if p.Prefetch != nil {
			payloads := make([][]byte, len(rows))
			for i, row := range rows {
				payloads[i] = row.Msg.Payload
			}
			p.Prefetch(payloads)
		}
		skipped, err := c.Skips.of(ctx, p.Name)
		if err != nil {
			log.Warn("catch-up stopped: the skipped events could not be read; the live subscriber takes over", "error", err)
			return total, nil
		}
		recs := make([]event.Recorded, len(rows))
		for i, row := range rows {
			if recs[i], err = unmarshal(row.Msg.Payload, p, skipped); err != nil {
				log.Warn("catch-up stopped at a message that does not decode; the live subscriber takes over",
					"message_uuid", row.Msg.UUID, "error", err)
				return total, nil
			}
		}
		ack := offsets.AckMessageQuery(p.Topic, rows[len(rows)-1], p.Name)
		var alsoInTx func(ctx context.Context, tx bun.Tx) error
		if c.SameDB {
			alsoInTx = func(ctx context.Context, tx bun.Tx) error { return c.exec(ctx, tx.Tx, ack) }
		}
		pageCtx, cancel := context.WithTimeout(ctx, time.Minute)
		pageCtx, span := c.pageSpan(pageCtx, p, rows)
		err = p.ApplyBatch(pageCtx, recs, alsoInTx)
		tracing.End(span, err)
		cancel()
		if err == nil && !c.SameDB {
			err = c.exec(ctx, c.DB, ack)
		}
		if err != nil {
			if ctx.Err() != nil {
				return total, ctx.Err()
			}
			log.Warn("catch-up stopped at a page that failed; the live subscriber takes over", "events", len(recs), "error", err)
			return total, nil
		}
		total += len(rows)
		pos = positionOf(rows[len(rows)-1])
		if len(rows) < schema.SubscribeBatchSize {
			break
		}
	}
	if total > 0 {
		elapsed := time.Since(start)
		log.Info("caught up", "events", total, "elapsed", elapsed, "events_per_second", int(float64(total)/elapsed.Seconds()))
	}
	return total, nil
}

// pageSpan starts the span of a page's apply, when c has a tracer: like a
// live apply's (startApply), a child of the span that published the first
// message of the page, linked to the others'.
func (c CatchUp) pageSpan(ctx context.Context, p Projection, rows []wsql.Row) (context.Context, trace.Span) {
	if c.Tracer == nil {
		return ctx, noop.Span{}
	}
	metadata := make([]map[string]string, len(rows)-1)
	for i, row := range rows[1:] {
		metadata[i] = row.Msg.Metadata
	}
	return c.Tracer.Start(tracing.Extract(ctx, rows[0].Msg.Metadata), "hearth.project",
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(tracing.Links(metadata...)...),
		trace.WithAttributes(attribute.String("hearth.projection", p.Name), attribute.String("messaging.destination.name", p.Topic),
			attribute.Bool("hearth.catch_up", true), attribute.Int("hearth.batch", len(rows))))
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func (c CatchUp) exec(ctx context.Context, db execer, q wsql.Query) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := db.ExecContext(ctx, q.Query, q.Args...)
	return err
}

func readPage(ctx context.Context, db *sql.DB, schema wsql.DefaultPostgreSQLSchema, offsets wsql.OffsetsAdapter, topic, group string) ([]wsql.Row, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	keyset := pubsub.KeysetSchema{DefaultPostgreSQLSchema: schema}
	q := keyset.SelectQuery(topic, group, offsets)
	rows, err := db.QueryContext(ctx, q.Query, q.Args...)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", topic, err)
	}
	defer rows.Close()
	var out []wsql.Row
	for rows.Next() {
		row, err := keyset.UnmarshalMessage(rows)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", topic, err)
		}
		out = append(out, row)
	}
	return out, errors.Join(rows.Err(), rows.Close())
}
