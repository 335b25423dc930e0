package pubsub_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/command"
	"hearth/domain/order"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
)

// A worker moves their schedule into service while the dispatcher edits
// the order: the edit commits before the status change reads the order.
// Nothing the status change read changed after it read it, so it succeeds,
// and the order (at the edit's amount) follows the schedule into service.
func TestScheduleStatusChangeSucceedsWhenItsOrderChangedBeforeItReadIt(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	ctx := context.Background()
	staff := uuid.New()
	_, err := f.ES.DB.Exec(`INSERT INTO staff (id, merchant_id, name) VALUES ($1, $2, 'Wanda')`, staff, f.MerchantID)
	require.NoError(t, err)
	id := f.CreateOrder(t)
	start := time.Now().Add(24 * time.Hour).Truncate(time.Hour)
	_, err = f.OrderCmds.Assign(ctx, command.AssignOrder{OrderTarget: command.OrderTarget{Meta: f.Meta(), OrderID: id},
		StaffID: staff, StartAt: start, EndAt: start.Add(time.Hour)})
	require.NoError(t, err)
	var scheduleID string
	require.NoError(t, f.ES.DB.QueryRow(`SELECT schedule_id FROM bookings WHERE order_id = $1`, id).Scan(&scheduleID))

	var edit error
	hooked := &beforeOrderLoad{Transactor: f.Tx, only: id, hook: func() {
		_, edit = f.Update(ctx, id, nil, func(o *order.Order) error {
			return o.UpdateDetails(order.Details{CustomerID: f.CustomerID, AmountCents: 700})
		})
	}}
	schedules, err := command.NewScheduleHandlers(hooked)
	require.NoError(t, err)
	_, err = schedules.ChangeStatus(ctx, command.ChangeScheduleStatus{Meta: f.Meta(), ScheduleID: scheduleID, Status: "in_service"})
	require.NoError(t, edit, "the order's edit commits")
	require.NoError(t, err, "the status change read the order after the edit committed: nothing raced it")

	stream := f.Stream(t, id)
	last := stream[len(stream)-1]
	require.Equal(t, "OrderStatusChanged", last.Type, "the order follows the schedule")
	require.Equal(t, "OrderDetailsUpdated", stream[len(stream)-2].Type)
}
