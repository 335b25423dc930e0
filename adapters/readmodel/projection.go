package readmodel

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/uptrace/bun"

	"hearth/app/event"
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
	name  string
	table string
	db    *bun.DB
	// load reads the row FOR UPDATE; found is false when there is none.
	load func(ctx context.Context, tx bun.Tx, id string) (v V, found bool, err error)
	// save inserts (when insert) or updates the row.
	save func(ctx context.Context, tx bun.Tx, v V, insert bool) error
	// meta returns the row's merchant and version.
	meta func(v V) (merchantID string, version int)
}

// apply applies one event in one read-model transaction. It returns nil
// without changing anything for an event already applied, a *GapError for
// one whose predecessor is missing, and ErrStaleTerm when ctx carries a
// leadership term (WithFence) that is no longer current.
func (p *projection[V]) apply(ctx context.Context, r event.Recorded) error {
	return p.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if err := checkFence(ctx, tx); err != nil {
			return err
		}
		view, found, err := p.load(ctx, tx, r.StreamID)
		if err != nil {
			return fmt.Errorf("lock %s %s: %w", p.table, r.StreamID, err)
		}
		merchantID, version := p.meta(view)
		if found && merchantID != r.MerchantID {
			return fmt.Errorf("%s %s belongs to merchant %s, event %s says %s", p.table, r.StreamID, merchantID, r.ID, r.MerchantID)
		}
		if r.Version <= version {
			return nil // already applied: redelivery changes nothing
		}
		if r.Version != version+1 {
			return &GapError{AggregateID: r.StreamID, RowVersion: version, Version: r.Version}
		}
		var before []byte
		if found {
			if before, err = json.Marshal(view); err != nil {
				return err
			}
		}
		if err := view.Apply(r); err != nil {
			return err
		}
		after, err := json.Marshal(view)
		if err != nil {
			return err
		}
		if err := p.save(ctx, tx, view, !found); err != nil {
			return fmt.Errorf("write %s %s: %w", p.table, r.StreamID, err)
		}
		return insertChange(ctx, tx, r, before, after)
	})
}

// selectForUpdate loads one row model by id with a row lock.
func selectForUpdate[M any](ctx context.Context, tx bun.Tx, model *M, id string) (bool, error) {
	err := tx.NewSelect().Model(model).Where("id = ?", id).For("UPDATE").Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// upsert inserts or updates one row model by primary key.
func upsert[M any](ctx context.Context, tx bun.Tx, model *M, insert bool) error {
	var err error
	if insert {
		_, err = tx.NewInsert().Model(model).Exec(ctx)
	} else {
		_, err = tx.NewUpdate().Model(model).WherePK().Exec(ctx)
	}
	return err
}
