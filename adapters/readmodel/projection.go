package readmodel

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"hearth/domain/event"
	"hearth/internal/aggregates"
	"hearth/internal/database"
)

// View is a read-model row as the application sees it: it folds events and
// knows its merchant and the stream version it reflects.
type View interface {
	Apply(r event.Recorded) error
}

// projection applies the events of one aggregate type to one table. Rows
// are loaded and saved through load and save; everything else (the lock,
// the version guard, the gap check, the change log) is the same for every
// aggregate and lives in apply.
type projection[V View] struct {
	agg    aggregates.Facts // its name, table and stream type
	db     *bun.DB
	refold Refold // to forget an erased subject (erasure.go)
	// load reads the row FOR UPDATE; found is false when there is none.
	load func(ctx context.Context, tx bun.Tx, id string) (v V, found bool, err error)
	// save is the statement that inserts (when insert) or updates the row.
	save func(tx bun.Tx, v V, insert bool) schema.QueryAppender
	// meta returns the row's merchant and version.
	meta func(v V) (merchantID string, version int)
	// empty returns the view of a row that does not exist yet.
	empty func() V
	// loadMany reads the rows of ids that exist, FOR UPDATE, by id.
	loadMany func(ctx context.Context, tx bun.Tx, ids []string) (map[string]V, error)
	// saveMany is the statement that inserts or updates rows.
	saveMany func(tx bun.Tx, vs []V) schema.QueryAppender
}

// Apply applies one event in one read-model transaction. It returns nil
// without changing anything for an event already applied, a *GapError for
// one whose predecessor is missing, and ErrStaleTerm when ctx carries a
// leadership term (WithFence) that is no longer current.
func (p *projection[V]) Apply(ctx context.Context, r event.Recorded) error {
	return p.inTx(ctx, func(ctx context.Context, tx bun.Tx) error { return p.applyOne(ctx, tx, r, true) })
}

// applyOne is Apply inside the transaction. last says that nothing follows
// in the transaction: its write then carries the COMMIT
// (database.WithCommit), one round trip less on the live path.
func (p *projection[V]) applyOne(ctx context.Context, tx bun.Tx, r event.Recorded, last bool) error {
	if _, ok := r.Event.(event.PersonalDataErased); ok {
		return p.erase(ctx, tx, r)
	}
	view, found, err := p.load(ctx, tx, r.StreamID)
	if err != nil {
		return fmt.Errorf("lock %s %s: %w", p.agg.Table, r.StreamID, err)
	}
	change, err := p.step(view, found, r, nil)
	if err != nil || change == nil {
		return err
	}
	if last {
		ctx = database.WithCommit(ctx)
	}
	if err := p.write(ctx, tx, p.save(tx, view, !found), []changeRow{*change}); err != nil {
		return fmt.Errorf("write %s %s: %w", p.agg.Table, r.StreamID, err)
	}
	return nil
}

// ApplyBatch applies events, in order, in one read-model transaction, with
// the same guard, gap check and change log as apply, in a few statements:
// one to lock every row the batch touches, one to write them, one for the
// change log. alsoInTx, when set, runs in the same transaction before the
// commit (the catch-up moves the consumer group's offset there when the
// read model shares the event store's database). Any error rolls the whole
// batch back.
func (p *projection[V]) ApplyBatch(ctx context.Context, recs []event.Recorded, alsoInTx func(ctx context.Context, tx bun.Tx) error) error {
	return p.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if hasErasure(recs) { // rare: one event at a time, in the same transaction
			for _, r := range recs {
				if err := p.applyOne(ctx, tx, r, false); err != nil {
					return err
				}
			}
			return runAlso(ctx, tx, alsoInTx)
		}
		ids := make([]string, 0, len(recs))
		seen := make(map[string]bool, len(recs))
		for _, r := range recs {
			if !seen[r.StreamID] {
				seen[r.StreamID] = true
				ids = append(ids, r.StreamID)
			}
		}
		views, err := p.loadMany(ctx, tx, ids)
		if err != nil {
			return fmt.Errorf("lock %d %s rows: %w", len(ids), p.agg.Table, err)
		}
		found := make(map[string]bool, len(views))
		for id := range views {
			found[id] = true
		}
		changes := make([]changeRow, 0, len(recs))
		dirty := make(map[string]bool, len(ids))
		last := make(map[string][]byte, len(ids)) // a row's JSON after its last event in this batch
		for _, r := range recs {
			view, ok := views[r.StreamID]
			if !ok {
				view = p.empty()
				views[r.StreamID] = view
			}
			change, err := p.step(view, found[r.StreamID] || dirty[r.StreamID], r, last[r.StreamID])
			if err != nil {
				return err
			}
			if change != nil {
				changes = append(changes, *change)
				dirty[r.StreamID] = true
				last[r.StreamID] = change.After
			}
		}
		if len(changes) == 0 {
			return runAlso(ctx, tx, alsoInTx)
		}
		write := make([]V, 0, len(dirty))
		for _, id := range ids {
			if dirty[id] {
				write = append(write, views[id])
			}
		}
		// Two statements: merged like Apply's, a page's text would be a
		// megabyte parsed without a prepared plan for the change log.
		if _, err := tx.NewRaw("?", p.saveMany(tx, write)).Exec(ctx); err != nil {
			return fmt.Errorf("write %d %s rows: %w", len(write), p.agg.Table, err)
		}
		if _, err := tx.Tx.ExecContext(ctx, insertChangesSQL, changeColumns(changes)...); err != nil {
			return fmt.Errorf("change log of %d events from %s: %w", len(changes), changes[0].EventID, err)
		}
		return runAlso(ctx, tx, alsoInTx)
	})
}

// Name names the projection (and its consumer group).
func (p *projection[V]) Name() string { return p.agg.Projection }

// Aggregate returns the facts of the aggregate type the projection reads.
func (p *projection[V]) Aggregate() aggregates.Facts { return p.agg }

// inTx runs fn in one read-model transaction. Every projection write goes
// through it, one event (Apply) or one batch (ApplyBatch) per transaction,
// and each checks the leadership term first, with its BEGIN (fenced).
func (p *projection[V]) inTx(ctx context.Context, fn func(ctx context.Context, tx bun.Tx) error) error {
	ctx, err := fenced(ctx, p.db.DB)
	if err != nil {
		return err
	}
	return staleTerm(p.db.RunInTx(ctx, nil, fn))
}

func runAlso(ctx context.Context, tx bun.Tx, fn func(ctx context.Context, tx bun.Tx) error) error {
	if fn == nil {
		return nil
	}
	return fn(ctx, tx)
}

// step applies r to view (the row as stored, or a fresh view when !found)
// and returns its change-log row; nil for an event already applied. before,
// when not nil, is view's JSON already (the previous event's after).
func (p *projection[V]) step(view V, found bool, r event.Recorded, before []byte) (*changeRow, error) {
	merchantID, version := p.meta(view)
	if found && merchantID != r.MerchantID {
		return nil, fmt.Errorf("%s %s belongs to merchant %s, event %s says %s", p.agg.Table, r.StreamID, merchantID, r.ID, r.MerchantID)
	}
	if r.Version <= version {
		return nil, nil // already applied: redelivery changes nothing
	}
	if r.Version != version+1 {
		return nil, &GapError{AggregateID: r.StreamID, RowVersion: version, Version: r.Version}
	}
	if found && before == nil {
		var err error
		if before, err = json.Marshal(view); err != nil {
			return nil, err
		}
	}
	if !found {
		before = nil
	}
	if err := view.Apply(r); err != nil {
		return nil, err
	}
	after, err := json.Marshal(view)
	if err != nil {
		return nil, err
	}
	return &changeRow{
		MerchantID: r.MerchantID, AggregateType: r.StreamType, AggregateID: r.StreamID, EventID: r.ID,
		Version: r.Version, Action: r.Type, Actor: r.Actor, Before: before, After: after, OccurredAt: r.OccurredAt,
	}, nil
}

// selectForUpdate loads one row model by id with a row lock.
func selectForUpdate[M any](ctx context.Context, tx bun.Tx, model *M, id string) (bool, error) {
	err := tx.NewSelect().Model(model).Where("id = ?", id).For("UPDATE").Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// upsert is the statement that inserts or updates one row model by
// primary key.
func upsert[M any](tx bun.Tx, model *M, insert bool) schema.QueryAppender {
	if insert {
		return tx.NewInsert().Model(model).Returning("")
	}
	return tx.NewUpdate().Model(model).WherePK().Returning("")
}

// selectManyForUpdate loads the row models of ids with row locks, in id
// order (so that two batches never deadlock), keyed by id.
func selectManyForUpdate[M any, V any](ctx context.Context, tx bun.Tx, ids []string, id func(*M) string, view func(*M) V) (map[string]V, error) {
	var rows []M
	if err := tx.NewSelect().Model(&rows).Where("id IN (?)", bun.In(ids)).OrderExpr("id").For("UPDATE").Scan(ctx); err != nil {
		return nil, err
	}
	out := make(map[string]V, len(rows))
	for i := range rows {
		out[id(&rows[i])] = view(&rows[i])
	}
	return out, nil
}

// upsertMany is the statement that inserts or updates row models by
// primary key.
func upsertMany[M any](tx bun.Tx, rows []M) schema.QueryAppender {
	return tx.NewInsert().Model(&rows).On("CONFLICT (id) DO UPDATE").Returning("")
}

// write saves rows (the statement Bun writes for them, values inlined) and
// inserts changes in one statement, so in one round trip on the live path:
// the rows' statement runs in a WITH clause before the change-log insert.
func (p *projection[V]) write(ctx context.Context, tx bun.Tx, rows schema.QueryAppender, changes []changeRow) error {
	saveSQL, err := rows.AppendQuery(p.db.QueryGen(), nil)
	if err != nil {
		return err
	}
	// The text is new every time (Bun inlines the row's values): executed
	// without preparing it, its parameters typed from their Go types.
	args := append([]any{pgx.QueryExecModeExec}, changeColumns(changes)...)
	_, err = tx.Tx.ExecContext(ctx, "WITH saved AS ("+string(saveSQL)+")\n"+insertChangesSQL, args...)
	return err
}

// newProjection builds the projection of one aggregate type on its table
// (tables.go): every projection stores rows the same way, only the row
// type differs.
func newProjection[V any, PV interface {
	*V
	View
}, R any](db *bun.DB, t *table[V, PV, R]) *projection[PV] {
	viewOf := func(r *R) PV { v := t.toView(*r); return &v }
	return &projection[PV]{
		agg: t.agg, db: db,
		load: func(ctx context.Context, tx bun.Tx, id string) (PV, bool, error) {
			var r R
			found, err := selectForUpdate(ctx, tx, &r, id)
			return viewOf(&r), found, err
		},
		save: func(tx bun.Tx, v PV, insert bool) schema.QueryAppender {
			r := t.toRow(*v)
			return upsert(tx, &r, insert)
		},
		meta:  func(v PV) (string, int) { return t.merchant(*v), t.version(*v) },
		empty: func() PV { var r R; return viewOf(&r) },
		loadMany: func(ctx context.Context, tx bun.Tx, ids []string) (map[string]PV, error) {
			return selectManyForUpdate(ctx, tx, ids, func(r *R) string { return t.id(t.toView(*r)) }, viewOf)
		},
		saveMany: func(tx bun.Tx, vs []PV) schema.QueryAppender {
			rows := make([]R, len(vs))
			for i, v := range vs {
				rows[i] = t.toRow(*v)
			}
			return upsertMany(tx, rows)
		},
	}
}
