package webhooks

import (
	"context"
	"database/sql"
	"errors"
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

// RaisedTerm is a term CatchUpTerms raised in the read model: the unit's
// name, and its term there before and after.
type RaisedTerm struct {
	Name     string
	From, To int64
}

// CatchUpTerms raises each term of projection_leader (in the read-model
// database, rm) that is behind its copy in event_store_terms (in the event
// store, es) to that copy. A read model restored from a backup has the
// terms of the backup's day, while the event store's copies moved on with
// every takeover since: each term the read model then begins is below the
// copy, refused by BeginTerm as stale, and the unit rests before it tries
// the next one, so delivery would stall for as many takeovers as the
// backup missed. Terms only ever rise, so this is safe beside a running
// leader too: its next fenced write fails and it steps down, as after any
// takeover.
func CatchUpTerms(ctx context.Context, es, rm *sql.DB) ([]RaisedTerm, error) {
	rows, err := es.QueryContext(ctx, `SELECT name, term FROM event_store_terms ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("read the event store's terms: %w", err)
	}
	var copies []RaisedTerm
	for rows.Next() {
		var t RaisedTerm
		if err := rows.Scan(&t.Name, &t.To); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the event store's terms: %w", err)
		}
		copies = append(copies, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the event store's terms: %w", err)
	}
	var raised []RaisedTerm
	for _, t := range copies {
		// A row missing from the restored read model (the unit first ran
		// after the backup) is created at the copy's term.
		tctx, cancel := context.WithTimeout(ctx, termTimeout)
		err := rm.QueryRowContext(tctx, `WITH before AS (SELECT term FROM projection_leader WHERE name = $1)
			INSERT INTO projection_leader AS p (name, term, holder, since) VALUES ($1, $2, 'restore', now())
			ON CONFLICT (name) DO UPDATE SET term = excluded.term WHERE p.term < excluded.term
			RETURNING coalesce((SELECT term FROM before), 0)`, t.Name, t.To).Scan(&t.From)
		cancel()
		if errors.Is(err, sql.ErrNoRows) { // already at the copy's term or past it
			continue
		}
		if err != nil {
			return raised, fmt.Errorf("raise the term of %s: %w", t.Name, err)
		}
		raised = append(raised, t)
	}
	return raised, nil
}
