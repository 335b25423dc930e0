package relay_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub/internal/pubsubtest"
	"hearth/app/command"
	"hearth/domain/apperr"
	"hearth/domain/order"
	"hearth/internal/pgtest"
)

// A schedule's status change books the schedule (its transaction takes its
// id there), then loads its order; an order change commits in between.
// The stream still holds the order's events in version order (the status
// change may fail as a conflict, never land before the version it followed).
func TestRelayKeepsVersionOrderWhenAnOlderTransactionWritesAfterANewerOne(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	ctx := context.Background()
	id, scheduleID := f.AssignedOrder(t)

	var concurrent error
	hooked := &pubsubtest.BeforeOrderLoad{Transactor: f.Tx, Hook: func() {
		_, concurrent = f.Update(ctx, id, nil, func(o *order.Order) error {
			return o.UpdateDetails(order.Details{CustomerID: f.CustomerID, AmountCents: 700})
		})
	}}
	schedules, err := command.NewScheduleHandlers(hooked)
	require.NoError(t, err)
	_, err = schedules.ChangeStatus(ctx, command.ChangeScheduleStatus{Meta: f.Meta(), ScheduleID: scheduleID, Status: "in_service"})
	require.NoError(t, concurrent)
	if err != nil {
		var conflict *apperr.ConflictError
		require.ErrorAs(t, err, &conflict)
	}

	f.startInstance(t, "a", f.config())
	f.requireAllRelayed(t) // each aggregate's events in version order
}
