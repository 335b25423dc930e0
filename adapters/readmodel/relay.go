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

// Save records p as topic's position, in a transaction that first checks
// the leadership term ctx carries (WithFence) and fails with ErrStaleTerm
// when it is no longer current. Without a term in ctx it refuses to write:
// the relay's progress is only ever written by the relay's leader.
func (o *RelayOffsets) Save(ctx context.Context, topic string, p RelayPosition) error {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	if !ok {
		return errors.New("readmodel: the relay's offsets are written only under a leadership term (WithFence)")
	}
	ctx, err := fenced(ctx, o.db.DB)
	if err != nil {
		return err
	}
	err = o.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO relay_offsets (topic, transaction_id, "offset", term, relayed_at)
			VALUES (?, ?, ?, ?, now())
			ON CONFLICT (topic) DO UPDATE SET transaction_id = EXCLUDED.transaction_id, "offset" = EXCLUDED."offset",
				term = EXCLUDED.term, relayed_at = EXCLUDED.relayed_at`, topic, p.TransactionID, p.Offset, f.Term)
		return err
	})
	if err = staleTerm(err); err != nil {
		return fmt.Errorf("save relay offset of %s: %w", topic, err)
	}
	return nil
}
