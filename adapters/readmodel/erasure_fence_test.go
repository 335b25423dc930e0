package readmodel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/readmodel"
	"hearth/app/command"
	"hearth/app/ops"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/internal/aggregates"
	"hearth/internal/pgtest"
)

// Under a leader's fence, a projection applies PersonalDataErased: the
// stream it reads again to fold is read outside the fenced transaction's
// BEGIN statement (which a read-only transaction would refuse).
func TestErasureUnderFence(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	merchantID, customerID := tenant(t, db)
	_, err := db.ExecContext(ctx, `INSERT INTO projection_leader (name, term, holder, since) VALUES ('test/lock', 7, 'test', now())`)
	require.NoError(t, err)
	store, v, orders := sealedWrites(t, db)
	w, err := orders.Create(ctx, command.CreateOrder{Meta: event.Meta{MerchantID: merchantID, Actor: "test",
		CorrelationID: uuid.New(), OccurredAt: time.Now()}, CustomerID: customerID, AmountCents: 100, Notes: "key under the mat"})
	require.NoError(t, err)
	id := w.Stream[0].StreamID
	_, err = store.EraseSubject(ctx, ops.ErasureRequest{By: "test", MerchantID: merchantID, SubjectType: event.SubjectCustomer,
		SubjectID: customerID, Confirm: customerID, CorrelationID: uuid.New()},
		func(ops.Erasure) ops.AuditEntry {
			return ops.AuditEntry{Actor: "test", Action: ops.ActionCustomerErase, Target: customerID}
		})
	require.NoError(t, err)

	log, err := pubsub.NewEventLog(db)
	require.NoError(t, err)
	projectors, err := readmodel.NewProjectors(db, readmodel.Refold{Log: log, Decoders: v})
	require.NoError(t, err)
	var projection readmodel.Projector
	for _, p := range projectors {
		if p.Aggregate().Type == aggregates.Order.Type {
			projection = p
		}
	}
	streams, err := log.Streams(ctx, aggregates.Order.Projection, aggregates.Order.Type, v.Decoder(aggregates.Order.Facts), []string{id})
	require.NoError(t, err)
	require.Len(t, streams[id], 2, "created, then erased")
	fenced := readmodel.WithFence(ctx, readmodel.Fence{Lock: "test/lock", Term: 7, Lease: 3 * time.Second})
	for _, r := range streams[id] {
		require.NoError(t, projection.Apply(fenced, r), "apply %s", r.Type)
	}
	var erased bool
	require.NoError(t, db.QueryRowContext(ctx, `SELECT 'notes' = ANY(erased) FROM orders WHERE id = ?`, id).Scan(&erased))
	require.True(t, erased, "the row shows the notes erased")
}
