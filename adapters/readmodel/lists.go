package readmodel

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/internal/keyset"
)

// listing is what every list query shares: a merchant, an optional staff
// scope (worker keys), filters, and newest-first or time-ordered pages.
// Its WHERE clauses are kept apart, since a list runs two statements: the
// page and its capped count (internal/keyset).
type listing struct {
	wheres   []func(*bun.SelectQuery) *bun.SelectQuery
	timeCol  string // the column from/to filter on
	timeSort bool
}

func newListing(scope query.Scope, staffCol, timeCol string) *listing {
	l := &listing{timeCol: timeCol}
	l.where(func(sel *bun.SelectQuery) *bun.SelectQuery { return scoped(sel, scope, staffCol) })
	return l
}

func (l *listing) where(w func(*bun.SelectQuery) *bun.SelectQuery) *listing {
	l.wheres = append(l.wheres, w)
	return l
}

// scoped limits a query to the merchant and, for worker keys, to rows of
// the worker's staff member (staffCol); a table without one (staffCol "")
// shows workers nothing.
func scoped(sel *bun.SelectQuery, scope query.Scope, staffCol string) *bun.SelectQuery {
	sel = sel.Where("merchant_id = ?", scope.MerchantID)
	switch {
	case scope.StaffID == "":
	case staffCol == "":
		sel = sel.Where("false")
	default:
		sel = sel.Where(staffCol+" = ?", scope.StaffID)
	}
	return sel
}

func (l *listing) in(col string, vals []string) *listing {
	if len(vals) > 0 {
		l.where(func(sel *bun.SelectQuery) *bun.SelectQuery { return sel.Where(col+" IN (?)", bun.List(vals)) })
	}
	return l
}

func (l *listing) eq(col, val string) *listing {
	if val != "" {
		l.where(func(sel *bun.SelectQuery) *bun.SelectQuery { return sel.Where(col+" = ?", val) })
	}
	return l
}

func (l *listing) between(from, to *time.Time) *listing {
	if from != nil {
		l.where(func(sel *bun.SelectQuery) *bun.SelectQuery { return sel.Where(l.timeCol+" >= ?", *from) })
	}
	if to != nil {
		l.where(func(sel *bun.SelectQuery) *bun.SelectQuery { return sel.Where(l.timeCol+" < ?", *to) })
	}
	l.timeSort = from != nil || to != nil
	return l
}

// listRow is a read-model row that a list shows: its view, and its sort
// key (created_at, or the time column when byTime) with its id.
type listRow[V any] interface {
	view() V
	sortKey(byTime bool) (time.Time, string)
}

// listPage runs l as page p of its rows R: time-ordered (earliest first)
// when a time range was given, otherwise newest first; ids break ties so
// pages never overlap.
func listPage[R listRow[V], V any](ctx context.Context, db *bun.DB, l *listing, p query.Page) (query.List[V], error) {
	order := keyset.Order{Col: "created_at", Desc: true}
	if l.timeSort {
		order = keyset.Order{Col: l.timeCol}
	}
	rows, err := keyset.Query[R]{
		DB: db,
		New: func(model any) *bun.SelectQuery {
			sel := db.NewSelect().Model(model)
			for _, w := range l.wheres {
				sel = w(sel)
			}
			return sel
		},
		Order: order,
		Key:   func(r R) (time.Time, string) { return r.sortKey(l.timeSort) },
	}.Run(ctx, p)
	if err != nil {
		return query.List[V]{}, err
	}
	return query.Map(rows, func(r R) V { return r.view() }), nil
}

// getOne reads one row visible to scope.
func getOne[M any](ctx context.Context, db *bun.DB, model *M, scope query.Scope, staffCol, id string) error {
	err := scoped(db.NewSelect().Model(model), scope, staffCol).Where("id = ?", id).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return apperr.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("select: %w", err)
	}
	return nil
}
