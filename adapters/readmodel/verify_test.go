package readmodel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
func TestVerifyChecksWhoseEachChangeLogRowIs(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	merchantID, otherMerchant, customerID := uuid.New(), uuid.New(), uuid.New()
	for _, m := range []string{merchantID, otherMerchant} {
		_, err := db.ExecContext(ctx, `INSERT INTO merchants (id, name) VALUES (?, ?)`, m, "m-"+m)
		require.NoError(t, err)
	}
	_, err := db.ExecContext(ctx, `INSERT INTO customers (id, merchant_id, name) VALUES (?, ?, 'Ada')`, customerID, merchantID)
	require.NoError(t, err)
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
	w, err := orders.Create(ctx, command.CreateOrder{Meta: event.Meta{MerchantID: merchantID, Actor: "test",
		CorrelationID: uuid.New(), OccurredAt: time.Now()}, CustomerID: customerID, AmountCents: 100, Notes: "key under the mat"})
	require.NoError(t, err)
	id := w.Stream[0].StreamID

	ordersRM, err := readmodel.NewOrders(db)
	require.NoError(t, err)
	for _, r := range w.Stream {
		require.NoError(t, ordersRM.Apply(ctx, r))
	}
	log, err := pubsub.NewEventLog(db)
	require.NoError(t, err)
	verify := func() []ops.Difference {
		report, err := readmodel.Verify(ctx, readmodel.VerifyConfig{Log: log, Decoders: v, DB: db, Verification: ops.Verification{Projections: []string{"orders"}}})
		require.NoError(t, err)
		return report.Differences()
	}
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
