package pubsub

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"hearth/internal/advisory"
)

// Consumer is one consumer group of a topic.
type Consumer struct{ Group, Topic string }

// Rewound is where RewindConsumers moved a group: the position of the
// last message retention deleted from its topic (TransactionID "0" and
// Offset 0 when it deleted none). Found is false for a group that has no
// offset yet (it never ran: it starts from the beginning anyway).
type Rewound struct {
	Consumer
	TransactionID string
	Offset        int64
	Found         bool
}

// ErrConsumersRunning is a rewind refused because an instance runs the
// consumers: a leader keeps its position in memory and would write it back
// over the rewind.
var ErrConsumersRunning = errors.New("an instance runs the projections (it holds their leadership guard): stop every instance in mode worker or all first")

// RewindConsumers moves each group's offset back to the oldest message its
// topic still holds, so that the group reads again everything retention
// kept: what a read model restored from a backup older than the event
// store's offsets needs (the projections' version guard ignores what the
// read model already has, and applies the rest with its change-log rows).
// A group is never moved before retention's mark (topic_pruned): a group
// behind it stops at the gap. It holds guard's advisory lock alone
// meanwhile, which every instance's projection lock sessions hold shared
// (leader.Config.Guard), workers on standby included: it is refused with
// ErrConsumersRunning while any runs, and no instance can start them until
// it has committed. All the groups move in one transaction.
func RewindConsumers(ctx context.Context, db *sql.DB, guard string, consumers []Consumer) ([]Rewound, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("rewind consumers: %w", err)
	}
	defer conn.Close()
	var alone bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, advisory.Key(guard)).Scan(&alone); err != nil {
		return nil, fmt.Errorf("rewind consumers: %w", err)
	}
	if !alone {
		return nil, ErrConsumersRunning
	}
	// The connection goes back to its pool, session and all: the lock is
	// released by hand, under its own short timeout, whatever ctx became.
	defer func() {
		unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.ExecContext(unlockCtx, `SELECT pg_advisory_unlock($1)`, advisory.Key(guard)); err != nil {
			// Not released: the pool must not lend this session again, or
			// no instance could take the guard while it lives.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("rewind consumers: %w", err)
	}
	out := make([]Rewound, 0, len(consumers))
	for _, c := range consumers {
		r := Rewound{Consumer: c}
		// The table's name is the topic's, one of Hearth's own (never
		// input), quoted as watermill-sql quotes it.
		err := tx.QueryRowContext(ctx, `UPDATE "watermill_offsets_`+c.Topic+`" SET
				last_processed_transaction_id = coalesce((SELECT transaction_id FROM topic_pruned WHERE topic = $1), '0'),
				offset_acked = coalesce((SELECT "offset" FROM topic_pruned WHERE topic = $1), 0)
			WHERE consumer_group = $2 RETURNING last_processed_transaction_id::text, offset_acked`, c.Topic, c.Group).Scan(&r.TransactionID, &r.Offset)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return nil, errors.Join(fmt.Errorf("rewind %s on %s: %w", c.Group, c.Topic, err), tx.Rollback())
		default:
			r.Found = true
		}
		out = append(out, r)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("rewind consumers: commit: %w", err)
	}
	return out, nil
}
