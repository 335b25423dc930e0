package readmodel_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"hearth/adapters/readmodel"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
)

// created is a first order event, as the event store would deliver it.
func created() event.Recorded {
	id := uuid.New()
	e := order.Created{OrderID: id, CustomerID: uuid.New(), AmountCents: 100, Status: order.StatusPending}
	return event.Recorded{Envelope: event.Envelope{
		ID: uuid.New(), Type: e.EventType(), StreamType: order.StreamType, StreamID: id, Version: 1,
		MerchantID: uuid.New(), OccurredAt: time.Now().UTC().Truncate(time.Microsecond), CorrelationID: uuid.New(), Actor: "key:test",
	}, Event: e}
}

// Under a fence, a projection writes only while its term is the current
// one, and records the term in the change log; otherwise it fails with
// ErrStaleTerm and writes nothing.
func TestFence(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).ReadModel)
	orders, err := readmodel.NewOrders(db)
	require.NoError(t, err)
	ctx := context.Background()
	fenced := func(term int64) context.Context {
		return readmodel.WithFence(ctx, readmodel.Fence{Lock: "test/lock", Term: term, Lease: 3 * time.Second})
	}
	changes := func(r event.Recorded) (n int, term *int64) {
		require.NoError(t, db.DB.QueryRow(`SELECT count(*), max(term) FROM change_log WHERE event_id = $1`, r.ID).Scan(&n, &term))
		return n, term
	}

	first := created()
	require.ErrorIs(t, orders.Apply(fenced(1), first), readmodel.ErrStaleTerm, "no term has been begun")
	n, _ := changes(first)
	require.Zero(t, n)

	_, err = db.DB.Exec(`INSERT INTO projection_leader (name, term, holder, since) VALUES ('test/lock', 7, 'test', now())`)
	require.NoError(t, err)
	require.NoError(t, orders.Apply(fenced(7), first))
	n, term := changes(first)
	require.Equal(t, 1, n)
	require.Equal(t, int64(7), *term, "change_log.term is the term of the write")

	second := created()
	err = orders.Apply(fenced(6), second)
	require.ErrorIs(t, err, readmodel.ErrStaleTerm)
	require.ErrorContains(t, err, "this leader's term is 6, the current term is 7")
	n, _ = changes(second)
	require.Zero(t, n, "a stale leader writes nothing")

	// Outside a term (tests applying events directly) nothing is checked
	// and no term is recorded.
	require.NoError(t, orders.Apply(ctx, second))
	n, term = changes(second)
	require.Equal(t, 1, n)
	require.Nil(t, term)
}

// A pool not opened by package database would ignore the fencing check:
// a fenced write on it is refused, not let through unchecked.
func TestFenceRefusesAPoolThatCannotCheck(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t).ReadModel
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	db := bun.NewDB(stdlib.OpenDB(*cfg), pgdialect.New())
	t.Cleanup(func() { _ = db.Close() })
	orders, err := readmodel.NewOrders(db)
	require.NoError(t, err)
	_, err = db.DB.Exec(`INSERT INTO projection_leader (name, term, holder, since) VALUES ('test/lock', 1, 'test', now())`)
	require.NoError(t, err)
	fenced := readmodel.WithFence(context.Background(), readmodel.Fence{Lock: "test/lock", Term: 1, Lease: 3 * time.Second})
	require.ErrorContains(t, orders.Apply(fenced, created()), "cannot check the leadership term")
	var n int
	require.NoError(t, db.DB.QueryRow(`SELECT count(*) FROM change_log`).Scan(&n))
	require.Zero(t, n)
}
