package relay_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/command"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/uuid"
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

	var concurrent error
	hooked := &beforeOrderLoad{Transactor: f.Tx, hook: func() {
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

// beforeOrderLoad is a Transactor whose sessions run hook (once) before
// their first load of an order.
type beforeOrderLoad struct {
	command.Transactor
	once sync.Once
	hook func()
}

func (b *beforeOrderLoad) Run(ctx context.Context, meta event.Meta, fn func(ctx context.Context, s command.Session) error) (command.Outcome, error) {
	return b.Transactor.Run(ctx, meta, func(ctx context.Context, s command.Session) error {
		return fn(ctx, &hookedSession{Session: s, b: b})
	})
}

type hookedSession struct {
	command.Session
	b *beforeOrderLoad
}

func (s *hookedSession) Order(ctx context.Context, id string) (*order.Order, error) {
	s.b.once.Do(s.b.hook)
	return s.Session.Order(ctx, id)
}
