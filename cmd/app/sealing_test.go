package main

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/app/command"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
)

// storedData is the stored data of a stream's events, in version order.
func (a *api) storedData(streamID string) string {
	a.t.Helper()
	var data string
	require.NoError(a.t, a.dbs.es.DB.QueryRowContext(a.t.Context(),
		`SELECT string_agg(data::text, E'\n' ORDER BY version) FROM events WHERE stream_id = $1`, streamID).Scan(&data))
	return data
}

// With PERSONAL_DATA_SEALING on (the default) an order's notes are sealed
// in the events table; with it off (the bench's baseline) they are stored
// in clear, and an order sealed before still opens: its stream loads for a
// command, and the read model shows its notes.
func TestPersonalDataSealingSetting(t *testing.T) {
	t.Parallel()
	for _, off := range []bool{false, true} {
		t.Run("off="+strconv.FormatBool(off), func(t *testing.T) {
			t.Parallel()
			a := setupConfigured(t, pgtest.NewDB(t), func(cfg *Config) { cfg.SealingOff = off }, nil)
			customer := a.createCustomer(a.opA, "Ada")
			created := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
				"customer_id": customer, "amount_cents": 100, "notes": "key under the mat"})
			id := created.Body["id"].(string)
			if off {
				require.Contains(t, a.storedData(id), "key under the mat", "sealing off: the notes are stored in clear")
			} else {
				require.NotContains(t, a.storedData(id), "key under the mat", "sealing on: the notes are sealed")
			}
			require.Equal(t, "key under the mat", a.awaitOrder(a.opA, id, 1).Body["notes"])
			if !off {
				return
			}

			// An order sealed before sealing was turned off.
			sealing, err := pubsub.NewStore(a.dbs.es, nil, a.w.vault)
			require.NoError(t, err)
			tx, err := pubsub.NewTransactor(sealing)
			require.NoError(t, err)
			orders, err := command.NewOrderHandlers(tx)
			require.NoError(t, err)
			w, err := orders.Create(t.Context(), command.CreateOrder{Meta: event.Meta{MerchantID: a.merchantA, Actor: "test",
				CorrelationID: uuid.New(), OccurredAt: time.Now()}, CustomerID: customer, AmountCents: 100, Notes: "call before 9"})
			require.NoError(t, err)
			old := w.Stream[0].StreamID
			require.NotContains(t, a.storedData(old), "call before 9", "sealed before")
			a.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+old, a.opA, map[string]any{"amount_cents": 200})
			read := a.awaitOrder(a.opA, old, 2)
			require.Equal(t, "call before 9", read.Body["notes"], read.String())
			require.EqualValues(t, 200, read.Body["amount_cents"], read.String())
		})
	}
}
