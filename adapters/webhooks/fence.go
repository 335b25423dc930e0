package webhooks

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"hearth/adapters/readmodel"
)

// FenceFunction is the event-store database's fencing check (migration
// eventstore/008), for readmodel.Fence.Function.
const FenceFunction = "hearth_es_fence"

// BeginTerm copies the leader's term f.Term (begun in projection_leader, in
// the read-model database) into event_store_terms, before the leader writes
// anything to the event store under it. The update only ever raises the
// term; it waits (at most termTimeout) for the transactions of an earlier
// term that checked the row, and those that check it later find the new
// term and fail. A term lower than the one there is stale
// (readmodel.ErrStaleTerm).
func BeginTerm(ctx context.Context, db *sql.DB, f readmodel.Fence) error {
	ctx, cancel := context.WithTimeout(ctx, termTimeout)
	defer cancel()
	var current int64
	err := db.QueryRowContext(ctx, `INSERT INTO event_store_terms AS t (name, term) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET term = excluded.term WHERE t.term < excluded.term
		RETURNING term`, f.Lock, f.Term).Scan(&current)
	if err == sql.ErrNoRows { // the row's term is already this one or later
		err = db.QueryRowContext(ctx, `SELECT term FROM event_store_terms WHERE name = $1`, f.Lock).Scan(&current)
	}
	if err != nil {
		return fmt.Errorf("begin term %d of %s in the event store: %w", f.Term, f.Lock, err)
	}
	if current != f.Term {
		return fmt.Errorf("%w: this leader's term is %d, the event store's is %d", readmodel.ErrStaleTerm, f.Term, current)
	}
	return nil
}

// termTimeout bounds BeginTerm's wait for an earlier term's transactions,
// as leader.Config.TermTimeout does for projection_leader.
const termTimeout = 15 * time.Second
