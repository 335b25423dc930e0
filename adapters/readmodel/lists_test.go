package readmodel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"hearth/adapters/readmodel"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/internal/pgtest"
)

// Following the cursors from the first page visits every matching row
// once, in the list's order (ties on the sort column broken by id), in
// both orders; the count stops at MaxDepth.
func TestListPages(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).ReadModel)
	ctx := context.Background()
	const small, big = "00000000-0000-4000-8000-00000000000a", "00000000-0000-4000-8000-00000000000b"
	// Three orders share each created_at and each scheduled start.
	_, err := db.ExecContext(ctx, `
		INSERT INTO orders (id, merchant_id, customer_id, amount_cents, status, scheduled_start_at, scheduled_end_at,
			settlement_status, created_at, updated_at, version)
		SELECT gen_random_uuid(), m, gen_random_uuid(), i, (ARRAY['pending','confirmed'])[1 + i % 2],
			timestamptz '2030-01-01' + (i / 3) * interval '1 hour', timestamptz '2030-01-01' + (i / 3 + 1) * interval '1 hour',
			'unsettled', timestamptz '2029-01-01' + (i / 3) * interval '1 minute', now(), 1
		FROM (VALUES (?::uuid, 1000), (?::uuid, ?)) AS v(m, n), generate_series(1, n) AS i`,
		small, big, query.MaxDepth+1)
	require.NoError(t, err)
	orders, err := readmodel.NewOrders(db)
	require.NoError(t, err)
	from, to := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)

	for _, c := range []struct {
		name   string
		filter query.OrderFilter
		order  string
	}{
		{"newest first", query.OrderFilter{}, "created_at DESC, id DESC"},
		{"one status", query.OrderFilter{Statuses: []string{"confirmed"}}, "created_at DESC, id DESC"},
		{"from/to: earliest start first", query.OrderFilter{From: &from, To: &to}, "scheduled_start_at ASC, id ASC"},
	} {
		want := ids(t, db, small, c.filter, c.order)
		scope := query.Scope{MerchantID: small}
		first, err := orders.List(ctx, scope, c.filter, query.Page{Number: 1, Size: 70})
		require.NoError(t, err, c.name)
		require.Equal(t, len(want), first.Total, c.name)
		require.True(t, first.TotalExact, c.name)
		require.Equal(t, 1, first.Page, c.name)
		var got []string
		for l := first; ; {
			require.Equal(t, min(70, len(want)-len(got)), len(l.Items), c.name)
			for _, o := range l.Items {
				got = append(got, o.ID)
			}
			if l.Next == nil {
				break
			}
			l, err = orders.List(ctx, scope, c.filter, query.Page{Size: 70, After: l.Next})
			require.NoError(t, err, c.name)
			require.Zero(t, l.Page, c.name)
		}
		require.Equal(t, want, got, "%s: every row once, in order", c.name)

		// A cursor is the sort key of a list's order: the other order
		// refuses it.
		other := query.OrderFilter{From: &from, To: &to}
		if c.filter.From != nil {
			other = query.OrderFilter{}
		}
		_, err = orders.List(ctx, scope, other, query.Page{Size: 70, After: first.Next})
		var invalid *apperr.ValidationError
		require.ErrorAs(t, err, &invalid, c.name)
		require.Equal(t, "cursor", invalid.Fields[0].Field)
	}

	l, err := orders.List(ctx, query.Scope{MerchantID: big}, query.OrderFilter{}, query.Page{Number: 1, Size: 10})
	require.NoError(t, err)
	require.Equal(t, query.MaxDepth, l.Total, "counted up to MaxDepth")
	require.False(t, l.TotalExact)
	l, err = orders.List(ctx, query.Scope{MerchantID: big}, query.OrderFilter{Statuses: []string{"pending"}}, query.Page{Number: 1, Size: 10})
	require.NoError(t, err)
	require.Equal(t, (query.MaxDepth+1)/2, l.Total)
	require.True(t, l.TotalExact)
}

// ids lists the merchant's orders that f selects, in order.
func ids(t *testing.T, db *bun.DB, merchantID string, f query.OrderFilter, order string) []string {
	t.Helper()
	sel := db.NewSelect().Table("orders").Column("id").Where("merchant_id = ?", merchantID)
	if len(f.Statuses) > 0 {
		sel = sel.Where("status IN (?)", bun.List(f.Statuses))
	}
	if f.From != nil {
		sel = sel.Where("scheduled_start_at >= ? AND scheduled_start_at < ?", *f.From, *f.To)
	}
	var out []string
	require.NoError(t, sel.OrderExpr(order).Scan(context.Background(), &out))
	return out
}
