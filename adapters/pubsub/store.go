// Package pubsub is Hearth's event store and event bus: events are appended
// to the events table and published through Watermill's SQL publisher in the
// same Postgres transaction, and a Watermill router delivers them to the
// projections.
package pubsub

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"

	"hearth/app/apperr"
	"hearth/app/event"
	"hearth/app/uuid"
)

// Topics. Each aggregate type has its own topic, so each projection reads
// only its own events; poisoned messages go to TopicPoison.
const (
	TopicOrders = "orders"
	TopicPoison = "poison"
)

// Schema and Offsets are the watermill-sql adapters for Hearth's topics. The
// tables themselves are created by migrations, never by InitializeSchema.
var (
	Schema  = wsql.DefaultPostgreSQLSchema{}
	Offsets = wsql.DefaultPostgreSQLOffsetsAdapter{}
)

// Store appends events to streams and publishes them in the same
// transaction.
type Store struct {
	db  *bun.DB
	log watermill.LoggerAdapter
}

// NewStore returns a store on the event-store database.
func NewStore(db *bun.DB, log watermill.LoggerAdapter) (*Store, error) {
	if db == nil {
		return nil, errors.New("pubsub.NewStore: nil db")
	}
	if log == nil {
		log = watermill.NopLogger{}
	}
	return &Store{db: db, log: log}, nil
}

// Stream is one stream's type, its decoder and its topic.
type Stream struct {
	Type   string
	Topic  string
	Decode event.Decoder
}

// Load reads a stream of the merchant in version order. A stream of another
// merchant or another type reads as apperr.ErrNotFound.
func (s *Store) Load(ctx context.Context, tx *sql.Tx, st Stream, merchantID, id string) ([]event.Recorded, int64, error) {
	rows, err := tx.QueryContext(ctx, `
		SELECT position, event_id, type, stream_type, stream_id, version, merchant_id,
		       occurred_at, correlation_id, causation_id, actor, data
		FROM events WHERE stream_id = $1 ORDER BY version`, id)
	if err != nil {
		return nil, 0, fmt.Errorf("load stream %s: %w", id, err)
	}
	defer rows.Close()
	var out []event.Recorded
	var position int64
	for rows.Next() {
		var env event.Envelope
		var data []byte
		if err := rows.Scan(&position, &env.ID, &env.Type, &env.StreamType, &env.StreamID, &env.Version,
			&env.MerchantID, &env.OccurredAt, &env.CorrelationID, &env.CausationID, &env.Actor, &data); err != nil {
			return nil, 0, fmt.Errorf("scan event of stream %s: %w", id, err)
		}
		if env.MerchantID != merchantID || env.StreamType != st.Type {
			return nil, 0, apperr.ErrNotFound
		}
		if env.Version != len(out)+1 {
			return nil, 0, fmt.Errorf("stream %s: version %d follows %d", id, env.Version, len(out))
		}
		env.Data = data
		e, err := st.Decode(env.Type, data)
		if err != nil {
			return nil, 0, fmt.Errorf("stream %s version %d: %w", id, env.Version, err)
		}
		out = append(out, event.Recorded{Envelope: env, Event: e})
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("load stream %s: %w", id, err)
	}
	if len(out) == 0 {
		return nil, 0, apperr.ErrNotFound
	}
	return out, position, nil
}

// Append stores events at versions after+1, after+2, ... and publishes them
// to the stream's topic, both inside tx. A concurrent append to the same
// stream makes this one fail with an *apperr.ConflictError when tx commits
// or earlier.
func (s *Store) Append(ctx context.Context, tx bun.Tx, st Stream, meta event.Meta, id string, after int, events []event.Event) ([]event.Recorded, int64, error) {
	if len(events) == 0 {
		return nil, 0, nil
	}
	// Postgres keeps microseconds: events, responses and read models agree.
	meta.OccurredAt = meta.OccurredAt.UTC().Truncate(time.Microsecond)
	recs := make([]event.Recorded, len(events))
	var q strings.Builder
	q.WriteString(`INSERT INTO events (event_id, stream_type, stream_id, version, merchant_id, type, data,
		occurred_at, correlation_id, causation_id, actor) VALUES `)
	args := make([]any, 0, len(events)*11)
	for i, e := range events {
		data, err := json.Marshal(e)
		if err != nil {
			return nil, 0, fmt.Errorf("marshal %s: %w", e.EventType(), err)
		}
		recs[i] = event.Recorded{Event: e, Envelope: event.Envelope{
			ID: uuid.New(), Type: e.EventType(), StreamType: st.Type, StreamID: id, Version: after + i + 1,
			MerchantID: meta.MerchantID, OccurredAt: meta.OccurredAt.UTC(), CorrelationID: meta.CorrelationID,
			CausationID: meta.CausationID, Actor: meta.Actor, Data: data,
		}}
		env := recs[i].Envelope
		if i > 0 {
			q.WriteString(", ")
		}
		n := len(args)
		q.WriteString("(")
		for j := 1; j <= 11; j++ {
			if j > 1 {
				q.WriteString(",")
			}
			q.WriteString("$" + strconv.Itoa(n+j))
		}
		q.WriteString(")")
		args = append(args, env.ID, env.StreamType, env.StreamID, env.Version, env.MerchantID, env.Type, string(data),
			env.OccurredAt, env.CorrelationID, env.CausationID, env.Actor)
	}
	q.WriteString(" RETURNING position")
	rows, err := tx.Tx.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return nil, 0, appendError(id, err)
	}
	var position int64
	for rows.Next() {
		var p int64
		if err := rows.Scan(&p); err != nil {
			rows.Close()
			return nil, 0, err
		}
		position = max(position, p)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, 0, appendError(id, err)
	}
	if err := s.publish(ctx, tx.Tx, st.Topic, recs); err != nil {
		return nil, 0, err
	}
	return recs, position, nil
}

// publish inserts the events into the topic table inside tx, so they are
// delivered if and only if tx commits.
func (s *Store) publish(ctx context.Context, tx *sql.Tx, topic string, recs []event.Recorded) error {
	pub, err := wsql.NewPublisher(tx, wsql.PublisherConfig{SchemaAdapter: Schema}, s.log)
	if err != nil {
		return fmt.Errorf("publisher: %w", err)
	}
	msgs := make([]*message.Message, len(recs))
	for i, r := range recs {
		payload, err := json.Marshal(r.Envelope)
		if err != nil {
			return fmt.Errorf("marshal envelope %s: %w", r.ID, err)
		}
		msg := message.NewMessage(r.ID, payload)
		msg.SetContext(ctx)
		msg.Metadata.Set("type", r.Type)
		msg.Metadata.Set("stream_id", r.StreamID)
		msg.Metadata.Set("version", strconv.Itoa(r.Version))
		msg.Metadata.Set("merchant_id", r.MerchantID)
		msg.Metadata.Set("correlation_id", r.CorrelationID)
		msgs[i] = msg
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		return fmt.Errorf("publish to %s: %w", topic, err)
	}
	return nil
}

func appendError(id string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "events_stream_version" {
		return &apperr.ConflictError{Detail: fmt.Sprintf("stream %s was changed concurrently; read it again and retry", id)}
	}
	return fmt.Errorf("append to stream %s: %w", id, err)
}
