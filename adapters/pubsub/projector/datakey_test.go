package projector_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/projector"
	"hearth/adapters/vault"
	"hearth/app/command"
	"hearth/domain/uuid"
	"hearth/internal/aggregates"
	"hearth/internal/keyring"
	"hearth/internal/pgtest"
)

// A sealed event whose customer has no data key and was not erased (a
// restore that lost data_keys) cannot be read: its aggregate parks with a
// reason that says so, never applied with empty fields, while another
// customer's orders keep flowing.
func TestMissingDataKeyParksTheAggregate(t *testing.T) {
	f := setup(t, pgtest.NewDB(t))
	ring, err := keyring.Parse("k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
	require.NoError(t, err)
	writerVault, err := vault.New(f.ES.DB, ring)
	require.NoError(t, err)
	store, err := pubsub.NewStore(f.ES, nil, writerVault)
	require.NoError(t, err)
	tx, err := pubsub.NewTransactor(store)
	require.NoError(t, err)
	orders, err := command.NewOrderHandlers(tx)
	require.NoError(t, err)
	other := uuid.New()
	_, err = f.ES.DB.Exec(`INSERT INTO customers (id, merchant_id, name) VALUES ($1, $2, 'Bea')`, other, f.MerchantID)
	require.NoError(t, err)
	create := func(customer string) string {
		w, err := orders.Create(context.Background(), command.CreateOrder{Meta: f.Meta(), CustomerID: customer, AmountCents: 500, Notes: "gate code 1234"})
		require.NoError(t, err)
		return w.Stream[0].StreamID
	}
	lost, kept := create(f.CustomerID), create(other)
	_, err = f.ES.DB.Exec(`DELETE FROM data_keys WHERE subject_id = $1`, f.CustomerID)
	require.NoError(t, err)

	readerVault, err := vault.New(f.ES.DB, ring) // a fresh instance: nothing cached
	require.NoError(t, err)
	p := projector.Projection{Name: "orders", Topic: pubsub.TopicOrders, Decode: readerVault.Decoder(aggregates.Order.Facts), Apply: f.Orders.Apply}
	parking, err := projector.NewParking(f.ES, p)
	require.NoError(t, err)
	f.RunRouterWith(t, parking, p)

	require.Eventually(t, func() bool { return f.rowVersion(t, kept) == 1 }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		parked, err := parking.List(context.Background(), "")
		return err == nil && len(parked) == 1 && parked[0].StreamID == lost
	}, 10*time.Second, 10*time.Millisecond)
	parked, err := parking.List(context.Background(), "")
	require.NoError(t, err)
	require.Contains(t, parked[0].Reason, "the data key of subject "+f.CustomerID+" is missing, and the subject was not erased")
	require.Zero(t, f.rowVersion(t, lost), "never applied with an empty field")
}
