package readmodel

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/uptrace/bun"
)

// RelayPosition is the last message of a topic that the relay has
// published: watermill-sql orders a topic by transaction id, then offset.
// The zero position is before the first message.
type RelayPosition struct {
	TransactionID int64
	Offset        int64
}

// RelayTarget is where the relay publishes: the JetStream stream and the
// prefix of its subjects (RELAY_STREAM, RELAY_SUBJECT_PREFIX). A position
// is a place in that stream; it means nothing for another.
type RelayTarget struct {
	Stream        string
	SubjectPrefix string
}

// RelayOffsets is the relay's progress, one position per topic (table
// relay_offsets), in the read-model database because that is where the
// leadership terms are: every write is fenced by the relay's term.
type RelayOffsets struct{ db *bun.DB }

// NewRelayOffsets returns the relay's progress on the read-model database.
func NewRelayOffsets(db *bun.DB) (*RelayOffsets, error) {
	if db == nil {
		return nil, errors.New("readmodel.NewRelayOffsets: nil db")
	}
	return &RelayOffsets{db: db}, nil
}

// Load returns topic's position; the zero position when nothing was relayed.
func (o *RelayOffsets) Load(ctx context.Context, topic string) (RelayPosition, error) {
	var p RelayPosition
	err := o.db.DB.QueryRowContext(ctx, `SELECT transaction_id, "offset" FROM relay_offsets WHERE topic = $1`, topic).
		Scan(&p.TransactionID, &p.Offset)
	if errors.Is(err, sql.ErrNoRows) {
		return RelayPosition{}, nil
	}
	if err != nil {
		return RelayPosition{}, fmt.Errorf("load relay offset of %s: %w", topic, err)
	}
	return p, nil
}

// Targets returns the targets the recorded positions were published to,
// one each; rows saved by an earlier release, which recorded none, count
// for none.
func (o *RelayOffsets) Targets(ctx context.Context) ([]RelayTarget, error) {
	rows, err := o.db.DB.QueryContext(ctx, `SELECT DISTINCT stream, subject_prefix FROM relay_offsets
		WHERE stream IS NOT NULL AND subject_prefix IS NOT NULL ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("load relay targets: %w", err)
	}
	defer rows.Close()
	var out []RelayTarget
	for rows.Next() {
		var t RelayTarget
		if err := rows.Scan(&t.Stream, &t.SubjectPrefix); err != nil {
			return nil, fmt.Errorf("load relay targets: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load relay targets: %w", err)
	}
	return out, nil
}

// Save records p as topic's position in target's stream, in a transaction
// that first checks the leadership term ctx carries (WithFence) and fails
// with ErrStaleTerm when it is no longer current. Without a term in ctx it refuses to write:
// the relay's progress is only ever written by the relay's leader.
func (o *RelayOffsets) Save(ctx context.Context, topic string, p RelayPosition, target RelayTarget) error {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	if !ok {
		return errors.New("readmodel: the relay's offsets are written only under a leadership term (WithFence)")
	}
	ctx, err := fenced(ctx, o.db.DB)
	if err != nil {
		return err
	}
	err = o.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO relay_offsets (topic, transaction_id, "offset", term, relayed_at, stream, subject_prefix)
			VALUES (?, ?, ?, ?, now(), ?, ?)
			ON CONFLICT (topic) DO UPDATE SET transaction_id = EXCLUDED.transaction_id, "offset" = EXCLUDED."offset",
				term = EXCLUDED.term, relayed_at = EXCLUDED.relayed_at, stream = EXCLUDED.stream,
				subject_prefix = EXCLUDED.subject_prefix`, topic, p.TransactionID, p.Offset, f.Term, target.Stream, target.SubjectPrefix)
		return err
	})
	if err = staleTerm(err); err != nil {
		return fmt.Errorf("save relay offset of %s: %w", topic, err)
	}
	return nil
}
