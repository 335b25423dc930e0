package pubsub_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/vault"
	"hearth/app/command"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/uuid"
	"hearth/internal/keyring"
	"hearth/internal/pgtest"
)

// Two erasures of different customers of one merchant scrub the receivers'
// error texts of the deliveries of one aggregate: an order that moved from
// the first customer to the second holds events sealed for both. The
// appends do not serialise them when only one appends to the order: the
// first customer's erasure run again (a second pass, or an operator's
// rerun) has nothing left to mark on it. Aggregates whose deliveries are
// most of the table, interleaved as their events came (no index order is
// worth following), make both read the table whole, and a table past a
// quarter of shared_buffers is read by synchronized sequential scans,
// which meet the rows in different orders. Neither erasure may fail for it
// (a deadlock).
//
// The steps are ordered by the locks they wait for (pg_blocking_pids),
// never by time, as in TestTwoErasuresDeletingTheSameStoredAnswersDoNotDeadlock:
// a third transaction holds a delivery of an order of the first customer
// only (d3, mid-table), so the first customer's erasure stops there after
// it took d2 (the table's first row); the second customer's erasure then
// starts its scan near d3, takes d1 (the last row) and waits for d2; the
// third transaction ends, and the first customer's erasure goes on to d1.
func TestTwoErasuresScrubbingTheSameDeliveriesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	db := f.ES.DB
	line, err := keyring.New("test")
	require.NoError(t, err)
	ring, err := keyring.Parse(line)
	require.NoError(t, err)
	v, err := vault.New(db, ring)
	require.NoError(t, err)
	store, err := pubsub.NewStore(f.ES, nil, v)
	require.NoError(t, err)
	tx, err := pubsub.NewTransactor(store)
	require.NoError(t, err)
	orders, err := command.NewOrderHandlers(tx)
	require.NoError(t, err)
	first, second := f.CustomerID, uuid.New()
	_, err = db.Exec(`INSERT INTO customers (id, merchant_id, name) VALUES ($1, $2, 'Bea')`, second, f.MerchantID)
	require.NoError(t, err)

	create := func(notes string) string {
		t.Helper()
		w, err := orders.Create(ctx, command.CreateOrder{Meta: f.Meta(), CustomerID: first, AmountCents: 500, Notes: notes})
		require.NoError(t, err)
		return w.Stream[0].StreamID
	}
	moved, own := create("gate code 1234"), create("back door")
	_, err = tx.Run(ctx, f.Meta(), func(ctx context.Context, s command.Session) error {
		o, err := s.Order(ctx, moved)
		if err != nil {
			return err
		}
		return o.UpdateDetails(order.Details{CustomerID: second, AmountCents: 500, Notes: "ring twice"})
	})
	require.NoError(t, err)

	// The first customer's erasure, before the deliveries: its run below
	// marks nothing more, and appends to no stream.
	r := <-eraseInBackground(ctx, store, f.MerchantID, event.SubjectCustomer, first)
	require.NoError(t, r.err)
	require.Equal(t, 2, r.erasure.Streams)

	endpoint := uuid.New()
	_, err = db.Exec(`INSERT INTO webhook_endpoints (id, merchant_id, url, secret, created_at, updated_at)
		VALUES ($1, $2, 'https://example.com/', 'whsec_test', now(), now())`, endpoint, f.MerchantID)
	require.NoError(t, err)
	var buffers int64
	require.NoError(t, db.QueryRow(`SELECT setting::bigint FROM pg_settings WHERE name = 'shared_buffers'`).Scan(&buffers))
	// Rows of about 1,900 bytes stored inline (a ping's body under TOAST's
	// threshold), at most three to a page (fillfactor 70), in two halves:
	// more pages than a quarter of the buffers, the size from which
	// Postgres synchronizes scans. The filler are the two orders'
	// deliveries, in turn, without an error text.
	filler := buffers * 5 / 8
	// d1, d2 and d3 have ids in that order: a transaction that locks them
	// in id order (not in the order its scan meets them) takes d1 and d2
	// before it waits for d3.
	ids := []string{uuid.New(), uuid.New(), uuid.New()}
	slices.Sort(ids) // the text of a uuid sorts as the uuid does
	delivery := func(key, aggregate string) (id string) {
		t.Helper()
		err := db.QueryRow(`INSERT INTO webhook_deliveries (id, endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version,
				status, attempts, response_status, error, completed_at)
			VALUES ($1, $2, $3, $4, 'order.updated', $5, 1, 'failed', 1, 500, $6, now()) RETURNING id`,
			ids[key[1]-'1'], endpoint, f.MerchantID, uuid.New(), aggregate,
			"the receiver said: "+key).Scan(&id)
		require.NoError(t, err)
		return id
	}
	fill := func() {
		t.Helper()
		_, err := db.Exec(`INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version,
				ping_payload, status, attempts, response_status, completed_at)
			SELECT $1, $2, gen_random_uuid(), 'order.updated', CASE WHEN i % 2 = 0 THEN $3 ELSE $4 END::uuid, 1,
				convert_to(repeat('x', 1800), 'UTF8'), 'succeeded', 1, 200, now()
			FROM generate_series(1, $5::bigint) AS i`, endpoint, f.MerchantID, moved, own, filler)
		require.NoError(t, err)
	}
	delivery("d2", moved)
	fill()
	d3 := delivery("d3", own)
	fill()
	delivery("d1", moved)
	_, err = db.Exec(`ANALYZE webhook_deliveries`)
	require.NoError(t, err)
	var pages int64
	require.NoError(t, db.QueryRow(`SELECT pg_relation_size('webhook_deliveries') / current_setting('block_size')::bigint`).Scan(&pages))
	require.Greater(t, pages, buffers/4, "a table Postgres reads by synchronized scans")

	// The third transaction, holding d3.
	holderPID, hold := holdRow(t, db, `SELECT 1 FROM webhook_deliveries WHERE id = $1 FOR UPDATE`, d3)

	again := eraseInBackground(ctx, store, f.MerchantID, event.SubjectCustomer, first)
	firstPID := blockedBy(t, db, holderPID, "the first customer's erasure, run again, waits for d3")
	other := eraseInBackground(ctx, store, f.MerchantID, event.SubjectCustomer, second)
	blockedBy(t, db, firstPID, "the second customer's erasure waits for the first's")
	require.NoError(t, hold.Commit())

	a, b := <-again, <-other
	requireNoDeadlock(t, a, b)
	require.Zero(t, a.erasure.Streams, "the first customer's streams were marked already")
	require.Equal(t, 1, b.erasure.Streams, "the moved order")
	var left int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM webhook_deliveries WHERE error LIKE 'the receiver said:%'`).Scan(&left))
	require.Zero(t, left, "d1, d2 and d3 scrubbed")
}
