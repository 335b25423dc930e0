// Package keyset runs the lists' queries so that what one page costs does
// not grow with the table: a page that follows a cursor is a keyset page
// (WHERE (sort column, id) < (the cursor's), in index order, LIMIT), as
// cheap at row 400,000 as at row 1; a numbered page is an OFFSET, which
// walks the skipped rows, so numbered pages stop at query.MaxDepth; and the
// count behind a list's total stops at query.MaxDepth too, instead of
// counting every matching row on every request.
//
// Each list's indexes lead with merchant_id, then its filter column, then
// its sort column and id in the same direction (migrations/readmodel), so a
// keyset page is one index range scan (docs/query-plans.md).
package keyset

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"
	"golang.org/x/sync/errgroup"

	"hearth/app/query"
	"hearth/domain/apperr"
)

// Order is a list's order: by Col, then by id, both descending (newest
// first) or both ascending.
type Order struct {
	Col  string
	Desc bool
}

// Query is one list: New returns a fresh SELECT of the list's table with
// its WHERE clauses, on model (a pointer to the rows to fill, or a nil
// pointer of the row type); Key returns a row's sort value and id.
type Query[R any] struct {
	DB    bun.IDB
	New   func(model any) *bun.SelectQuery
	Order Order
	Key   func(R) (time.Time, string)
}

// Run returns page p of the list, its capped count and the cursor of the
// next page. A cursor made for another order is an invalid "cursor".
func (q Query[R]) Run(ctx context.Context, p query.Page) (query.List[R], error) {
	if p.After != nil && p.After.Order != q.Order.Col {
		return query.List[R]{}, apperr.Invalid("cursor", "was made for a list sorted by %s; this one is sorted by %s: start again without a cursor", p.After.Order, q.Order.Col)
	}
	dir, cmp := "ASC", ">"
	if q.Order.Desc {
		dir, cmp = "DESC", "<"
	}
	var rows []R
	var n int
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		sel := q.New(&rows).OrderExpr("? "+dir+", id "+dir, bun.Ident(q.Order.Col)).Limit(int64(p.Size + 1))
		if p.After != nil {
			sel = sel.Where("(?, id) "+cmp+" (?, ?)", bun.Ident(q.Order.Col), p.After.At, p.After.ID)
		} else {
			sel = sel.Offset(int64(p.Offset()))
		}
		return sel.Scan(gctx)
	})
	g.Go(func() error {
		// Counting stops at MaxDepth + 1 rows: enough to tell "more".
		matching := q.New((*R)(nil)).ColumnExpr("1").Limit(int64(query.MaxDepth + 1))
		return q.DB.NewSelect().ColumnExpr("count(*)").TableExpr("(?) AS matching", matching).Scan(gctx, &n)
	})
	if err := g.Wait(); err != nil {
		return query.List[R]{}, fmt.Errorf("list: %w", err)
	}
	l := query.List[R]{Items: rows, Total: min(n, query.MaxDepth), TotalExact: n <= query.MaxDepth, PageSize: p.Size}
	if p.After == nil {
		l.Page = p.Number
	}
	if len(rows) > p.Size {
		l.Items = rows[:p.Size]
		at, id := q.Key(rows[p.Size-1])
		l.Next = &query.Cursor{Order: q.Order.Col, At: at, ID: id}
	}
	if l.Items == nil {
		l.Items = []R{}
	}
	return l, nil
}
