package command

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/schedule"
	"hearth/domain/uuid"
)

// OrderTarget says which order a command changes and, optionally, the
// version the client read (a stale one answers a conflict).
type OrderTarget struct {
	Meta            event.Meta
	OrderID         string
	ExpectedVersion *int
}

// UpdateOrderDetails changes customer, amount and notes. Nil fields keep
// their value.
type UpdateOrderDetails struct {
	OrderTarget
	CustomerID  *string
	AmountCents *int64
	Notes       *string
}

// ChangeOrderStatus moves an order along its life cycle.
type ChangeOrderStatus struct {
	OrderTarget
	Status string
}

// CancelOrder cancels an order with a reason.
type CancelOrder struct {
	OrderTarget
	Reason string
}

// AssignOrder sets the staff member and window of an order.
type AssignOrder struct {
	OrderTarget
	StaffID      string
	StartAt      time.Time
	EndAt        time.Time
	DispatchNote string
}

// SettleOrder records the payment state of an order.
type SettleOrder struct {
	OrderTarget
	SettlementStatus string
	PaidAmountCents  int64
	PaymentMethod    string
	PaidAt           *time.Time
	SettlementNote   string
}

// CreateOrder creates an order for an existing customer.
type CreateOrder struct {
	Meta             event.Meta
	RequestID        string
	CustomerID       string
	AmountCents      int64
	Notes            string
	ScheduledStartAt *time.Time
	ScheduledEndAt   *time.Time
}

// OrderHandlers handles the order commands. Each method is one use case:
// load, decide, append, in one transaction.
type OrderHandlers struct {
	tx Transactor
}

// NewOrderHandlers checks its dependency.
func NewOrderHandlers(tx Transactor) (OrderHandlers, error) {
	if tx == nil {
		return OrderHandlers{}, errors.New("command.NewOrderHandlers: nil transactor")
	}
	return OrderHandlers{tx: tx}, nil
}

// Create handles CreateOrder.
func (h OrderHandlers) Create(ctx context.Context, cmd CreateOrder) (Written, error) {
	o, err := order.New(order.NewOrder{
		ID: uuid.New(), RequestID: cmd.RequestID, CustomerID: cmd.CustomerID,
		AmountCents: cmd.AmountCents, Notes: cmd.Notes,
		ScheduledStartAt: cmd.ScheduledStartAt, ScheduledEndAt: cmd.ScheduledEndAt,
	})
	if err != nil {
		return Written{}, err
	}
	out, err := h.tx.Run(ctx, cmd.Meta, func(ctx context.Context, s Session) error {
		if err := requireCustomer(s, cmd.CustomerID); err != nil {
			return err
		}
		if cmd.RequestID != "" {
			if err := checkRequest(ctx, s, cmd.RequestID, cmd.CustomerID); err != nil {
				return err
			}
		}
		s.AddOrder(o)
		return nil
	})
	return out.Of(o.ID()), err
}

// checkRequest refuses an order's request_id unless it names a service
// request of the merchant, of the order's customer: like every id in a
// body, another merchant's is refused as an unknown one.
func checkRequest(ctx context.Context, s Session, requestID, customerID string) error {
	r, err := s.ServiceRequest(ctx, requestID)
	if errors.Is(err, apperr.ErrNotFound) {
		return apperr.Invalid("request_id", "no service request %s in this merchant", requestID)
	}
	if err != nil {
		return err
	}
	if r.CustomerID() != customerID {
		return apperr.Invalid("request_id", "service request %s is of another customer", requestID)
	}
	return nil
}

// update runs fn on the target order in one transaction; the edits it
// decides must leave the order within order.MaxEvents (CheckGrowth).
func (h OrderHandlers) update(ctx context.Context, t OrderTarget, fn func(ctx context.Context, s Session, o *order.Order) error) (Written, error) {
	out, err := h.tx.Run(ctx, t.Meta, func(ctx context.Context, s Session) error {
		o, err := s.Order(ctx, t.OrderID)
		if err != nil {
			return err
		}
		if err := checkVersion("order", t.OrderID, t.ExpectedVersion, o.Version()); err != nil {
			return err
		}
		if err := fn(ctx, s, o); err != nil {
			return err
		}
		return o.CheckGrowth()
	})
	return out.Of(t.OrderID), err
}

// UpdateDetails handles UpdateOrderDetails.
func (h OrderHandlers) UpdateDetails(ctx context.Context, cmd UpdateOrderDetails) (Written, error) {
	return h.update(ctx, cmd.OrderTarget, func(ctx context.Context, s Session, o *order.Order) error {
		d := o.Details()
		if cmd.CustomerID != nil && *cmd.CustomerID != d.CustomerID {
			if _, err := checkCustomer(ctx, s, *cmd.CustomerID); err != nil {
				return err
			}
			// An order's service request is its customer's: one that came
			// from a request keeps the request's customer.
			if o.RequestID() != "" {
				return apperr.Invalid("customer_id", "the order came from service request %s, of customer %s: its customer cannot change",
					o.RequestID(), d.CustomerID)
			}
			// The notes were written about the earlier customer, and an
			// event is sealed for the order's customer when it is
			// written: carried over silently, they would be sealed for
			// the new one, and the earlier customer's erasure would not
			// reach them. The client carries them over by restating them.
			if cmd.Notes == nil && d.Notes != "" {
				return apperr.Invalid("notes", "the notes were written while the order was customer %s's: with a new customer_id, "+
					"send notes too (the same text to keep it, \"\" to drop it)", d.CustomerID)
			}
			d.CustomerID = *cmd.CustomerID
		}
		if cmd.AmountCents != nil {
			d.AmountCents = *cmd.AmountCents
		}
		if cmd.Notes != nil {
			d.Notes = *cmd.Notes
		}
		return o.UpdateDetails(d)
	})
}

// ChangeStatus handles ChangeOrderStatus.
func (h OrderHandlers) ChangeStatus(ctx context.Context, cmd ChangeOrderStatus) (Written, error) {
	to, ok := order.ParseStatus(cmd.Status)
	if !ok {
		return Written{}, apperr.Invalid("status", "must be one of %s", statusNames())
	}
	return h.update(ctx, cmd.OrderTarget, func(ctx context.Context, s Session, o *order.Order) error {
		from := o.Status()
		if err := o.ChangeStatus(to, cmd.Meta.OccurredAt); err != nil {
			return err
		}
		return scheduleFollows(ctx, s, o, from, to)
	})
}

// scheduleFollows moves the order's live schedule along with an order that
// goes into service, or is completed, through its own status: the schedule
// is then in service, or done and no longer booked, so that the staff
// member's time is free again and the worker is not left a job they cannot
// start. An order taken back from dispatching to confirmed is no longer
// dispatched: its planned schedule is cancelled and the order loses its
// staff member, as when the schedule is cancelled. (The other way, the
// schedule's status drives the order.)
func scheduleFollows(ctx context.Context, s Session, o *order.Order, from, to order.Status) error {
	var steps []schedule.Status
	switch {
	case to == order.StatusInService:
		steps = []schedule.Status{schedule.StatusInService}
	case to == order.StatusCompleted:
		steps = []schedule.Status{schedule.StatusInService, schedule.StatusDone}
	case to == order.StatusConfirmed && from == order.StatusDispatching:
		steps = []schedule.Status{schedule.StatusCancelled}
		o.Unassign()
	default:
		return nil
	}
	return moveLiveSchedule(ctx, s, o.ID(), steps...)
}

// moveLiveSchedule takes the order's live schedule, if it has one, through
// steps (those it is at already left out) and books it as it then is.
func moveLiveSchedule(ctx context.Context, s Session, orderID string, steps ...schedule.Status) error {
	sch, found, err := s.LiveSchedule(ctx, orderID)
	if err != nil || !found {
		return err
	}
	for _, st := range steps {
		if sch.Status() == st {
			continue
		}
		if err := sch.ChangeStatus(st); err != nil {
			return err
		}
	}
	return s.Book(ctx, sch)
}

// Cancel handles CancelOrder: the order is cancelled and its live schedule,
// if any, is cancelled with it, freeing the staff member's time.
func (h OrderHandlers) Cancel(ctx context.Context, cmd CancelOrder) (Written, error) {
	return h.update(ctx, cmd.OrderTarget, func(ctx context.Context, s Session, o *order.Order) error {
		if err := o.Cancel(cmd.Reason); err != nil {
			return err
		}
		return moveLiveSchedule(ctx, s, o.ID(), schedule.StatusCancelled)
	})
}

// Assign handles AssignOrder, a flow: the order takes the staff member and
// window (and moves to dispatching), and its schedule is created, or
// updated while planned, and booked. A staff member who is already booked
// in an overlapping window is a conflict naming that schedule.
func (h OrderHandlers) Assign(ctx context.Context, cmd AssignOrder) (Written, error) {
	a := order.Assignment{StaffID: cmd.StaffID, StartAt: cmd.StartAt, EndAt: cmd.EndAt, DispatchNote: cmd.DispatchNote}
	if err := a.Validate(); err != nil {
		return Written{}, err
	}
	return h.update(ctx, cmd.OrderTarget, func(ctx context.Context, s Session, o *order.Order) error {
		// Past dispatching the order's schedule is in service, done or
		// cancelled, and the assignment stands as it was: restated, it
		// changes nothing (a schedule must not be made again for it).
		if o.Status() != order.StatusDispatching && o.Restates(a) {
			return nil
		}
		w := schedule.Window{StaffID: cmd.StaffID, StartAt: cmd.StartAt, EndAt: cmd.EndAt}
		sch, found, err := s.LiveSchedule(ctx, o.ID())
		if err != nil {
			return err
		}
		// The staff member is checked for a new assignment only: the one
		// the order and its schedule have, restated (a retried PUT),
		// changes nothing and succeeds, as every such command does, even
		// when they have been made inactive since (the order keeps them
		// until someone reassigns or cancels it).
		restated := found && o.Restates(a) &&
			sch.Window() == schedule.Window{StaffID: w.StaffID, StartAt: event.Instant(w.StartAt), EndAt: event.Instant(w.EndAt)}
		if !restated {
			exists, active, err := s.StaffActive(ctx, cmd.StaffID)
			if err != nil {
				return err
			}
			if !exists {
				return apperr.Invalid("staff_id", "no staff member %s in this merchant", cmd.StaffID)
			}
			if !active {
				return &apperr.RuleError{Rule: "order.staff_inactive", Detail: fmt.Sprintf("staff member %s is not active", cmd.StaffID)}
			}
		}
		if err := o.Assign(a); err != nil {
			return err
		}
		if found {
			if err := sch.Reassign(w); err != nil {
				return err
			}
		} else {
			if sch, err = schedule.New(uuid.New(), o.ID(), o.CustomerID(), w, ""); err != nil {
				return err
			}
			s.AddSchedule(sch)
		}
		return s.Book(ctx, sch)
	})
}

// Settle handles SettleOrder.
func (h OrderHandlers) Settle(ctx context.Context, cmd SettleOrder) (Written, error) {
	return h.update(ctx, cmd.OrderTarget, func(ctx context.Context, s Session, o *order.Order) error {
		return o.Settle(order.Settlement{
			Status: order.SettlementStatus(cmd.SettlementStatus), PaidAmountCents: cmd.PaidAmountCents,
			PaymentMethod: cmd.PaymentMethod, PaidAt: cmd.PaidAt, Note: cmd.SettlementNote,
		})
	})
}

// checkVersion compares the version a client read with the stored one.
func checkVersion(kind, id string, expected *int, actual int) error {
	if expected != nil && *expected != actual {
		return &apperr.VersionError{Kind: kind, ID: id, Expected: *expected, Actual: actual}
	}
	return nil
}

func statusNames() string {
	names := make([]string, len(order.Statuses))
	for i, s := range order.Statuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}
