package pubsub

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/uptrace/bun"

	"hearth/domain/event"
)

// EventLog reads whole streams back from the events table, the source of
// truth, for verification and rebuilds. Events a projection's operator
// skipped are returned as event.Skipped, as the projection applied them.
type EventLog struct {
	db *bun.DB
}

// NewEventLog returns the log on the event-store database.
func NewEventLog(db *bun.DB) (*EventLog, error) {
	if db == nil {
		return nil, errors.New("pubsub.NewEventLog: nil db")
	}
	return &EventLog{db: db}, nil
}

// Count returns how many events of streamType the log holds.
func (l *EventLog) Count(ctx context.Context, streamType string) (int64, error) {
	var n int64
	err := l.db.DB.QueryRowContext(ctx, `SELECT count(*) FROM events WHERE stream_type = $1`, streamType).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count %s events: %w", streamType, err)
	}
	return n, nil
}

// Scan calls fn with every stream of streamType, in stream-id order, each
// with its events in version order, as projection sees them. It reads one
// consistent snapshot.
func (l *EventLog) Scan(ctx context.Context, projection, streamType string, decode event.Decoder, fn func(stream []event.Recorded) error) error {
	tx, err := l.db.DB.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	skipped, err := skippedEventsTx(ctx, tx, projection)
	if err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, selectEvents+` WHERE stream_type = $1 ORDER BY stream_id, version`, streamType)
	if err != nil {
		return fmt.Errorf("scan %s events: %w", streamType, err)
	}
	defer rows.Close()
	var stream []event.Recorded
	for rows.Next() {
		r, err := scanEvent(rows, decode, skipped)
		if err != nil {
			return err
		}
		if len(stream) > 0 && stream[0].StreamID != r.StreamID {
			if err := fn(stream); err != nil {
				return err
			}
			stream = nil
		}
		stream = append(stream, r)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("scan %s events: %w", streamType, err)
	}
	if len(stream) > 0 {
		return fn(stream)
	}
	return nil
}

// Streams returns the streams of the given ids (of streamType), each in
// version order, as projection sees them.
func (l *EventLog) Streams(ctx context.Context, projection, streamType string, decode event.Decoder, ids []string) (map[string][]event.Recorded, error) {
	out := map[string][]event.Recorded{}
	if len(ids) == 0 {
		return out, nil
	}
	tx, err := l.db.DB.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	skipped, err := skippedEventsTx(ctx, tx, projection)
	if err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, selectEvents+` WHERE stream_type = $1 AND stream_id = ANY($2::text[]::uuid[]) ORDER BY stream_id, version`,
		streamType, ids)
	if err != nil {
		return nil, fmt.Errorf("read %s streams: %w", streamType, err)
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanEvent(rows, decode, skipped)
		if err != nil {
			return nil, err
		}
		out[r.StreamID] = append(out[r.StreamID], r)
	}
	return out, rows.Err()
}

const selectEvents = `SELECT event_id, type, stream_type, stream_id, version, merchant_id,
	occurred_at, correlation_id, causation_id, actor, data FROM events`

func scanEvent(rows *sql.Rows, decode event.Decoder, skipped map[string]bool) (event.Recorded, error) {
	var env event.Envelope
	var data []byte
	if err := rows.Scan(&env.ID, &env.Type, &env.StreamType, &env.StreamID, &env.Version, &env.MerchantID,
		&env.OccurredAt, &env.CorrelationID, &env.CausationID, &env.Actor, &data); err != nil {
		return event.Recorded{}, fmt.Errorf("scan event: %w", err)
	}
	env.Data, env.OccurredAt = data, env.OccurredAt.UTC()
	r := event.Recorded{Envelope: env}
	if skipped[env.ID] {
		return event.Skip(r), nil
	}
	e, err := decode(env.Type, data)
	if err != nil {
		return event.Recorded{}, fmt.Errorf("stream %s version %d: %w", env.StreamID, env.Version, err)
	}
	r.Event = e
	return r, nil
}

func skippedEventsTx(ctx context.Context, tx *sql.Tx, projection string) (map[string]bool, error) {
	rows, err := tx.QueryContext(ctx, `SELECT event_id FROM skipped_events WHERE projection = $1`, projection)
	if err != nil {
		return nil, fmt.Errorf("read skipped events: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}
