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
)

// listing is what every list query shares: a merchant, an optional staff
// scope (worker keys), filters, and newest-first or time-ordered pages.
type listing struct {
	sel      *bun.SelectQuery
	timeCol  string // the column from/to filter on
	timeSort bool
}

func newListing(sel *bun.SelectQuery, scope query.Scope, staffCol, timeCol string) *listing {
	return &listing{sel: scoped(sel, scope, staffCol), timeCol: timeCol}
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
		l.sel = l.sel.Where(col+" IN (?)", bun.List(vals))
	}
	return l
}

func (l *listing) eq(col, val string) *listing {
	if val != "" {
		l.sel = l.sel.Where(col+" = ?", val)
	}
	return l
}

func (l *listing) between(from, to *time.Time) *listing {
	if from != nil {
		l.sel = l.sel.Where(l.timeCol+" >= ?", *from)
	}
	if to != nil {
		l.sel = l.sel.Where(l.timeCol+" < ?", *to)
	}
	l.timeSort = from != nil || to != nil
	return l
}

// page runs the query: time-ordered (earliest first) when a time range was
// given, otherwise newest first; ids break ties so pages never overlap.
func (l *listing) page(ctx context.Context, p query.Page) (int, error) {
	if l.timeSort {
		l.sel = l.sel.OrderExpr(l.timeCol + " ASC, id ASC")
	} else {
		l.sel = l.sel.OrderExpr("created_at DESC, id DESC")
	}
	total, err := l.sel.Limit(int64(p.Size)).Offset(int64(p.Offset())).ScanAndCount(ctx)
	return int(total), err
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
