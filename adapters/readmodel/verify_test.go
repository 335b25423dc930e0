package readmodel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"hearth/adapters/pubsub"
	"hearth/adapters/readmodel"
	"hearth/adapters/vault"
	"hearth/app/command"
	"hearth/app/ops"
	"hearth/app/query"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/internal/keyring"
	"hearth/internal/pgtest"
)

// Verification checks each change-log row against its event: the merchant
// it is filed under (a merchant's history and export select by it), its
// actor and its time, not only its version, event and action.
// verifyEnv is an event store and read model with an orders projection
// applied by hand, and verify, which runs app verify's check of it.
type verifyEnv struct {
	db                     *bun.DB
	merchantID, customerID string
	orders                 command.OrderHandlers
	ordersRM               *readmodel.Orders
	verify                 func() []ops.Difference
}

func newVerifyEnv(t *testing.T) verifyEnv {
	t.Helper()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	e := verifyEnv{db: db}
	e.merchantID, e.customerID = tenant(t, db)
	_, v, orders := sealedWrites(t, db)
	e.orders = orders
	var err error
	e.ordersRM, err = readmodel.NewOrders(db)
	require.NoError(t, err)
	log, err := pubsub.NewEventLog(db)
	require.NoError(t, err)
	e.verify = func() []ops.Difference {
		report, err := readmodel.Verify(ctx, readmodel.VerifyConfig{Log: log, Decoders: v, DB: db, Verification: ops.Verification{Projections: []string{"orders"}}})
		require.NoError(t, err)
		return report.Differences()
	}
	return e
}

// tenant adds a merchant and a customer of it.
func tenant(t *testing.T, db *bun.DB) (merchantID, customerID string) {
	t.Helper()
	merchantID, customerID = uuid.New(), uuid.New()
	_, err := db.ExecContext(context.Background(), `INSERT INTO merchants (id, name) VALUES (?, ?)`, merchantID, "m-"+merchantID)
	require.NoError(t, err)
	_, err = db.ExecContext(context.Background(), `INSERT INTO customers (id, merchant_id, name) VALUES (?, ?, 'Ada')`, customerID, merchantID)
	require.NoError(t, err)
	return merchantID, customerID
}

// sealedWrites is the write side on db, personal fields sealed: the
// store, its vault and the order handlers.
func sealedWrites(t *testing.T, db *bun.DB) (*pubsub.Store, *vault.Vault, command.OrderHandlers) {
	t.Helper()
	line, err := keyring.New("test")
	require.NoError(t, err)
	ring, err := keyring.Parse(line)
	require.NoError(t, err)
	v, err := vault.New(db.DB, ring)
	require.NoError(t, err)
	store, err := pubsub.NewStore(db, nil, v)
	require.NoError(t, err)
	tx, err := pubsub.NewTransactor(store)
	require.NoError(t, err)
	orders, err := command.NewOrderHandlers(tx)
	require.NoError(t, err)
	return store, v, orders
}

// order creates an order (with notes, sealed) and applies its events to
// the read model; it returns the order's id.
func (e verifyEnv) order(t *testing.T) string {
	t.Helper()
	w, err := e.orders.Create(context.Background(), command.CreateOrder{Meta: event.Meta{MerchantID: e.merchantID, Actor: "test",
		CorrelationID: uuid.New(), OccurredAt: time.Now()}, CustomerID: e.customerID, AmountCents: 100, Notes: "key under the mat"})
	require.NoError(t, err)
	for _, r := range w.Stream {
		require.NoError(t, e.ordersRM.Apply(context.Background(), r))
	}
	return w.Stream[0].StreamID
}

func TestVerifyChecksWhoseEachChangeLogRowIs(t *testing.T) {
	t.Parallel()
	e := newVerifyEnv(t)
	db, ctx, merchantID, verify, ordersRM := e.db, context.Background(), e.merchantID, e.verify, e.ordersRM
	otherMerchant := uuid.New()
	_, err := db.ExecContext(ctx, `INSERT INTO merchants (id, name) VALUES (?, ?)`, otherMerchant, "m-"+otherMerchant)
	require.NoError(t, err)
	id := e.order(t)
	require.Empty(t, verify(), "clean before the damage")

	// The change-log row of the order's first event, filed under another
	// merchant, then with another actor, then another time.
	damage := func(set string, args ...any) {
		_, err := db.ExecContext(ctx, `UPDATE change_log SET `+set+` WHERE aggregate_id = ?`, append(args, id)...)
		require.NoError(t, err)
	}
	damage("merchant_id = ?", otherMerchant)
	leaked, err := ordersRM.Changes(ctx, query.Scope{MerchantID: otherMerchant}, "order", id)
	require.NoError(t, err)
	require.Len(t, leaked, 1, "the other merchant now reads the order's history")
	require.NotEmpty(t, verify(), "a change-log row filed under another merchant")
	damage("merchant_id = ?", merchantID)
	require.Empty(t, verify())
	damage("actor = 'someone else'")
	require.NotEmpty(t, verify(), "a change-log row of another actor")
	damage("actor = 'test'")
	require.Empty(t, verify())
	damage("occurred_at = occurred_at - interval '1 hour'")
	require.NotEmpty(t, verify(), "a change-log row of another time")
}

// An event verification cannot decode (here of a type this version does
// not know) is a
// difference of its aggregate, not the end of the verification: the other
// aggregates are verified.
func TestVerifyReportsAnEventThatDoesNotDecodeAndGoesOn(t *testing.T) {
	t.Parallel()
	e := newVerifyEnv(t)
	broken, fine := e.order(t), e.order(t)
	require.Empty(t, e.verify())
	_, err := e.db.ExecContext(context.Background(), `UPDATE events SET type = 'order.from_a_later_version' WHERE stream_id = ?`, broken)
	require.NoError(t, err)
	_, err = e.db.ExecContext(context.Background(), `UPDATE orders SET amount_cents = 1 WHERE id = ?`, fine)
	require.NoError(t, err)

	diffs := e.verify()
	byAggregate := map[string][]string{}
	for _, d := range diffs {
		byAggregate[d.AggregateID] = append(byAggregate[d.AggregateID], d.What)
	}
	require.Equal(t, []string{"fold"}, byAggregate[broken], "%v", diffs)
	require.Contains(t, byAggregate[fine], "amount_cents", "the other aggregate is verified too: %v", diffs)
}

// A difference in a personal field is reported without the text on either
// side (the report lands on an operator's terminal, in tickets and logs),
// yet tells the two apart; other fields show their values.
func TestVerifyShowsNoPersonalText(t *testing.T) {
	t.Parallel()
	e := newVerifyEnv(t)
	id := e.order(t)
	_, err := e.db.ExecContext(context.Background(), `UPDATE orders SET notes = 'spare key with the neighbour', amount_cents = 7 WHERE id = ?`, id)
	require.NoError(t, err)
	_, err = e.db.ExecContext(context.Background(), `UPDATE change_log SET after = jsonb_set(after, '{notes}', '"spare key with the neighbour"') WHERE aggregate_id = ?`, id)
	require.NoError(t, err)
	diffs := e.verify()
	var whats []string
	for _, d := range diffs {
		whats = append(whats, d.What)
		for _, text := range []string{"key under the mat", "spare key with the neighbour"} {
			require.NotContains(t, d.String(), text, "%s", d.What)
		}
		if d.What == "notes" {
			require.NotEqual(t, d.ReadModel, d.EventLog, "the two texts are told apart")
			require.Contains(t, d.EventLog, "17 characters")
		}
		if d.What == "amount_cents" {
			require.Equal(t, "7", d.ReadModel, "a field that is not personal shows its value")
		}
	}
	require.Subset(t, whats, []string{"notes", "amount_cents", "change_log after"})
}
