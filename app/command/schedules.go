package command

import (
	"context"
	"errors"

	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/schedule"
)

// ChangeScheduleStatus moves a schedule, and its order with it.
type ChangeScheduleStatus struct {
	Meta            event.Meta
	ScheduleID      string
	ExpectedVersion *int
	Status          string
	// WorkerStaffID is set when a worker key acts: it may move only its own
	// schedules, and only to in_service or done.
	WorkerStaffID string
	// OrderID, when set, is the order the client acts on: a schedule of
	// another order is not found (the console's order page names both).
	OrderID string
}

// ScheduleHandlers handles the schedule commands.
type ScheduleHandlers struct {
	tx Transactor
}

// NewScheduleHandlers checks its dependency.
func NewScheduleHandlers(tx Transactor) (ScheduleHandlers, error) {
	if tx == nil {
		return ScheduleHandlers{}, errors.New("command.NewScheduleHandlers: nil transactor")
	}
	return ScheduleHandlers{tx: tx}, nil
}

// ChangeStatus handles ChangeScheduleStatus, a flow in one transaction: the
// schedule changes status and its booking follows, and the order follows
// the schedule (in_service -> in_service; done -> completed; cancelled ->
// the order loses its assignment and returns to confirmed).
func (h ScheduleHandlers) ChangeStatus(ctx context.Context, cmd ChangeScheduleStatus) (Written, error) {
	to, ok := schedule.ParseStatus(cmd.Status)
	if !ok {
		return Written{}, apperr.Invalid("status", "must be one of planned, in_service, done, cancelled")
	}
	if cmd.WorkerStaffID != "" && to != schedule.StatusInService && to != schedule.StatusDone {
		return Written{}, apperr.ErrForbidden
	}
	out, err := h.tx.Run(ctx, cmd.Meta, func(ctx context.Context, s Session) error {
		sch, err := s.Schedule(ctx, cmd.ScheduleID)
		if err != nil {
			return err
		}
		if cmd.WorkerStaffID != "" && sch.Window().StaffID != cmd.WorkerStaffID {
			return apperr.ErrNotFound // a worker cannot even see another's schedule
		}
		if cmd.OrderID != "" && sch.OrderID() != cmd.OrderID {
			return apperr.ErrNotFound
		}
		if err := checkVersion("schedule", cmd.ScheduleID, cmd.ExpectedVersion, sch.Version()); err != nil {
			return err
		}
		from := sch.Status()
		if err := sch.ChangeStatus(to); err != nil || from == to {
			return err
		}
		// The order is read before the booking is written: the write gives
		// the transaction its place in the event log, which must come after
		// every version it read (else an order change committed in between
		// would make this change a conflict, though it read that change).
		o, err := s.Order(ctx, sch.OrderID())
		if err != nil {
			return err
		}
		if err := s.Book(ctx, sch); err != nil {
			return err
		}
		switch to {
		case schedule.StatusInService:
			return o.FollowSchedule(order.StatusInService, cmd.Meta.OccurredAt)
		case schedule.StatusDone:
			return o.FollowSchedule(order.StatusCompleted, cmd.Meta.OccurredAt)
		case schedule.StatusCancelled:
			o.Unassign()
		}
		return nil
	})
	return out.Of(cmd.ScheduleID), err
}
