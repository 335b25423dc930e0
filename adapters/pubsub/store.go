// Package pubsub is Hearth's event store and event bus: events are appended
// to the events table and published through Watermill's SQL publisher in the
// same Postgres transaction, and a Watermill router delivers them to the
// projections.
package pubsub

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"hearth/adapters/vault"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/internal/aggregates"
	"hearth/internal/database"
	"hearth/internal/tracing"
)

// TopicPoison is where poisoned messages go. Each aggregate type has its
// own topic (internal/aggregates), so each projection reads only its own
// events.
const TopicPoison = "poison"

// Schema and Offsets are the watermill-sql adapters for Hearth's topics. The
// tables themselves are created by migrations, never by InitializeSchema.
var (
	Schema  = wsql.DefaultPostgreSQLSchema{}
	Offsets = wsql.DefaultPostgreSQLOffsetsAdapter{}
)

// Store appends events to streams and publishes them in the same
// transaction.
type Store struct {
	db    *bun.DB
	log   watermill.LoggerAdapter
	vault *vault.Vault // nil: personal fields stay in clear
	clear bool         // NewClearStore: the vault opens, never seals
	dec   aggregates.Decoders
	// tracer makes the spans of the commands' transactions; nil: none.
	tracer trace.Tracer
}

// NewStore returns a store on the event-store database. With a vault (in
// production always: serve requires a master key), the personal fields of
// every event it appends are sealed with its subject's data key, and the
// events it loads are opened; without one (tests, the bench's baseline)
// they are stored in clear.
func NewStore(db *bun.DB, log watermill.LoggerAdapter, v *vault.Vault) (*Store, error) {
	if db == nil {
		return nil, errors.New("pubsub.NewStore: nil db")
	}
	if log == nil {
		log = watermill.NopLogger{}
	}
	s := &Store{db: db, log: log, vault: v, dec: aggregates.Plain}
	if v != nil {
		s.dec = v
	}
	return s, nil
}

// NewClearStore returns a store that appends personal fields in clear but
// still opens, through v, the sealed events it loads (and forgets an erased
// subject's key): PERSONAL_DATA_SEALING=off, for measuring the cost of
// sealing only. Erasure cannot reach the text of the events it writes.
func NewClearStore(db *bun.DB, log watermill.LoggerAdapter, v *vault.Vault) (*Store, error) {
	s, err := NewStore(db, log, v)
	if err != nil {
		return nil, err
	}
	s.clear = true
	return s, nil
}

// SetTracer has the commands' transactions make spans (a transaction's,
// and its appends' with the commit), whose trace context every message
// they publish then carries (tracing.Inject). Nil, the default: no span.
// Call it before the store is used.
func (s *Store) SetTracer(t trace.Tracer) { s.tracer = t }

// span starts a span of the store's tracer, or returns a span that records
// nothing when it has none (tracing off: no allocation).
func (s *Store) span(ctx context.Context, name string) (context.Context, trace.Span) {
	if s.tracer == nil {
		return ctx, noop.Span{}
	}
	return s.tracer.Start(ctx, name)
}

// Stream is one stream's type, its decoder and its topic: an aggregate
// type's facts from the one registry (internal/aggregates).
type Stream = aggregates.Facts

// Read returns a stream of the merchant in version order, outside any
// command. A stream of another merchant or another type reads as
// apperr.ErrNotFound.
func (s *Store) Read(ctx context.Context, st Stream, merchantID, id string) ([]event.Recorded, error) {
	var recs []event.Recorded
	err := database.WithConn(ctx, s.db.DB, func(conn *pgx.Conn) error {
		var err error
		// One statement needs no transaction: no BEGIN to send.
		recs, _, err = s.load(ctx, &pipe{conn: conn, begun: true}, st, merchantID, id)
		return err
	})
	return recs, err
}

// load reads a stream of the merchant in version order, with the store
// position of its last event, in one round trip.
func (s *Store) load(ctx context.Context, p *pipe, st Stream, merchantID, id string) ([]event.Recorded, int64, error) {
	var out []event.Recorded
	var position int64
	foreign := false // another merchant's stream, or another type's
	decode := s.dec.Decoder(st)
	b := &pgx.Batch{}
	b.Queue(`
		SELECT position, event_id, type, stream_type, stream_id, version, merchant_id,
		       occurred_at, correlation_id, causation_id, actor, data
		FROM events WHERE stream_id = $1 ORDER BY version`, id).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var env event.Envelope
			if err := rows.Scan(&position, &env.ID, &env.Type, &env.StreamType, &env.StreamID, &env.Version,
				&env.MerchantID, &env.OccurredAt, &env.CorrelationID, &env.CausationID, &env.Actor, &env.Data); err != nil {
				return fmt.Errorf("scan event of stream %s: %w", id, err)
			}
			if env.MerchantID != merchantID || env.StreamType != st.Type {
				foreign = true
				return nil
			}
			if env.Version != len(out)+1 {
				return fmt.Errorf("stream %s: version %d follows %d", id, env.Version, len(out))
			}
			e, err := decode(env.Type, env.Data)
			var temporary interface{ Temporary() bool }
			switch {
			case errors.As(err, &temporary) && temporary.Temporary(): // its data key could not be read
				return fmt.Errorf("stream %s version %d: %w", id, env.Version, err)
			case err != nil:
				return &event.UnreadableError{EventID: env.ID, Type: env.Type, StreamID: id, Version: env.Version, Err: err}
			}
			out = append(out, event.Recorded{Envelope: env, Event: e})
		}
		return rows.Err()
	})
	if err := p.send(ctx, b); err != nil {
		return nil, 0, fmt.Errorf("load stream %s: %w", id, err)
	}
	if foreign || len(out) == 0 {
		return nil, 0, apperr.ErrNotFound
	}
	return out, position, nil
}

// appended is what queueAppend queued: the events, and their last store
// position once the batch has run.
type appended struct {
	recs     []event.Recorded
	position int64
}

// queueAppend queues, into b, the insert of events at versions after+1,
// after+2, ... and their publication to the stream's topic, so that both
// run in the transaction that sends b. An append that races another one to
// the same stream fails with an *apperr.ConflictError when b runs. The
// personal fields of events are sealed for subject (the aggregate's
// customer, whose key the session has adopted) when the store has a vault;
// erased says the subject was erased and the events' personal fields are
// empty (session.spared): they are sealed under a key never stored.
func (s *Store) queueAppend(ctx context.Context, b *pgx.Batch, st Stream, meta event.Meta, id, subject string, erased bool, after int, events []event.Event) (*appended, error) {
	out := &appended{recs: make([]event.Recorded, len(events))}
	if len(events) == 0 {
		return out, nil
	}
	if after > 0 {
		// The version this append follows must be of an older transaction
		// id than this one's: every reader of the events (the topics, the
		// event feed, the relay) orders them by transaction id, not by
		// commit. A transaction that took its id before loading the stream
		// (a booking written first; a fencing check right after BEGIN,
		// which is why leaders check with the commit: WithCommitCheck) can read a
		// version that a newer transaction committed meanwhile; its append
		// would then come before that version. It fails as a conflict.
		b.Queue(predecessorSQL, id, after).Fn = predecessorCheck(id)
	}
	// Postgres keeps microseconds: events, responses and read models agree.
	meta.OccurredAt = event.Instant(meta.OccurredAt)
	var q strings.Builder
	q.WriteString(`INSERT INTO events (event_id, stream_type, stream_id, version, merchant_id, type, data,
		occurred_at, correlation_id, causation_id, actor, subject_id) VALUES `)
	args := make([]any, 0, len(events)*12)
	for i, e := range events {
		data, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("marshal %s: %w", e.EventType(), err)
		}
		var sealedFor *string
		if fields := st.Personal[e.EventType()]; s.vault != nil && !s.clear && len(fields) > 0 {
			if subject == "" {
				return nil, fmt.Errorf("seal %s of %s %s: the aggregate names no customer", e.EventType(), st.Type, id)
			}
			if erased {
				data, err = vault.SealErased(subject, e.EventType(), data, fields)
			} else {
				data, err = s.vault.Seal(subject, e.EventType(), data, fields)
			}
			if err != nil {
				return nil, sealError(err)
			}
			sealedFor = &subject
		}
		out.recs[i] = event.Recorded{Event: e, Envelope: event.Envelope{
			ID: uuid.New(), Type: e.EventType(), StreamType: st.Type, StreamID: id, Version: after + i + 1,
			MerchantID: meta.MerchantID, OccurredAt: meta.OccurredAt, CorrelationID: meta.CorrelationID,
			CausationID: meta.CausationID, Actor: meta.Actor, Data: data,
		}}
		env := out.recs[i].Envelope
		if i > 0 {
			q.WriteString(", ")
		}
		n := len(args)
		q.WriteString("(")
		for j := 1; j <= 12; j++ {
			if j > 1 {
				q.WriteString(",")
			}
			q.WriteString("$" + strconv.Itoa(n+j))
		}
		q.WriteString(")")
		args = append(args, env.ID, env.StreamType, env.StreamID, env.Version, env.MerchantID, env.Type, string(data),
			env.OccurredAt, env.CorrelationID, env.CausationID, env.Actor, sealedFor)
	}
	q.WriteString(" RETURNING position")
	b.Queue(q.String(), args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var p int64
			if err := rows.Scan(&p); err != nil {
				return err
			}
			out.position = max(out.position, p)
		}
		if err := rows.Err(); err != nil {
			return appendError(id, err)
		}
		return nil
	})
	if err := s.publish(ctx, b, st.Topic, out.recs); err != nil {
		return nil, err
	}
	return out, nil
}

// publish has watermill-sql's publisher write the events to topic; its
// insert joins b, so they are delivered if and only if b's transaction
// commits. Each message carries the trace context of ctx's span, when it
// has one (tracing on), so that its consumers' spans join the write's
// trace.
func (s *Store) publish(ctx context.Context, b *pgx.Batch, topic string, recs []event.Recorded) error {
	pub, err := wsql.NewPublisher(batchExecutor{batch: b, topic: topic}, wsql.PublisherConfig{SchemaAdapter: Schema}, s.log)
	if err != nil {
		return fmt.Errorf("publisher: %w", err)
	}
	msgs := make([]*message.Message, len(recs))
	for i, r := range recs {
		payload, err := marshalEnvelope(r.Envelope)
		if err != nil {
			return fmt.Errorf("marshal envelope %s: %w", r.ID, err)
		}
		msg := message.NewMessage(r.ID, payload)
		msg.Metadata.Set("type", r.Type)
		msg.Metadata.Set("stream_id", r.StreamID)
		msg.Metadata.Set("version", strconv.Itoa(r.Version))
		msg.Metadata.Set("merchant_id", r.MerchantID)
		msg.Metadata.Set("correlation_id", r.CorrelationID)
		tracing.Inject(ctx, msg.Metadata)
		msgs[i] = msg
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		return fmt.Errorf("publish to %s: %w", topic, err)
	}
	return nil
}

// marshalEnvelope is json.Marshal(env) without a second pass over
// env.Data, which queueAppend has just marshalled (and sealed) itself:
// json.Marshal would validate and compact it again, byte by byte. The
// topic table's json column still checks the whole payload.
func marshalEnvelope(env event.Envelope) ([]byte, error) {
	data := env.Data
	env.Data = nil // encodes as null, the last member
	head, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	head, ok := bytes.CutSuffix(head, []byte("null}"))
	if !ok || len(data) == 0 {
		return nil, errors.New("envelope without data")
	}
	return append(append(head, data...), '}'), nil
}

// batchExecutor is where watermill-sql's publisher writes: its insert is
// queued into a batch instead of running at once. The publisher calls
// nothing but ExecContext; the embedded executor is nil.
type batchExecutor struct {
	wsql.ContextExecutor
	batch *pgx.Batch
	topic string
}

func (e batchExecutor) ExecContext(_ context.Context, query string, args ...any) (sql.Result, error) {
	e.batch.Queue(query, args...).Fn = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("publish to %s: %w", e.topic, err)
		}
		return nil
	}
	return driver.RowsAffected(0), nil
}

// sealError is a failed seal: an erased customer is the client's conflict.
func sealError(err error) error {
	var erased *vault.ErasedError
	if errors.As(err, &erased) {
		return &apperr.ConflictError{Detail: fmt.Sprintf("customer %s was erased: nothing personal can be written about them any more", erased.Subject)}
	}
	return err
}

// predecessorSQL fails, dividing by zero, when version $2 of stream $1 was
// written by a transaction with a newer id than the current one.
const predecessorSQL = `SELECT 1 / (CASE WHEN EXISTS (SELECT 1 FROM events
	WHERE stream_id = $1 AND version = $2 AND transaction_id > pg_current_xact_id()) THEN 0 ELSE 1 END)`

// predecessorCheck reads predecessorSQL's result: its refusal is a conflict.
func predecessorCheck(id string) func(pgx.BatchResults) error {
	return func(br pgx.BatchResults) error {
		_, err := br.Exec()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "22012" {
			return &apperr.ConflictError{Detail: fmt.Sprintf("stream %s was changed concurrently; read it again and retry", id)}
		}
		if err != nil {
			return fmt.Errorf("append to stream %s: %w", id, err)
		}
		return nil
	}
}

func appendError(id string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "events_stream_version" {
		return &apperr.ConflictError{Detail: fmt.Sprintf("stream %s was changed concurrently; read it again and retry", id)}
	}
	return fmt.Errorf("append to stream %s: %w", id, err)
}
