package command

import (
	"context"
	"fmt"
	"strings"
	"time"

	"hearth/app/apperr"
	"hearth/app/event"
	"hearth/app/order"
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

// OrderHandlers handles the commands that change an existing order. Each
// Handle is one use case: load, decide, append.
type OrderHandlers struct {
	repo OrderRepository
	dir  Directory
}

// NewOrderHandlers checks its dependencies.
func NewOrderHandlers(repo OrderRepository, dir Directory) (OrderHandlers, error) {
	if err := notNil(map[string]any{"repo": repo, "dir": dir}); err != nil {
		return OrderHandlers{}, fmt.Errorf("NewOrderHandlers: %w", err)
	}
	return OrderHandlers{repo: repo, dir: dir}, nil
}

func (h OrderHandlers) update(ctx context.Context, t OrderTarget, fn func(o *order.Order) error) (Written, error) {
	return h.repo.Update(ctx, t.Meta, t.OrderID, t.ExpectedVersion, fn)
}

// UpdateDetails handles UpdateOrderDetails.
func (h OrderHandlers) UpdateDetails(ctx context.Context, cmd UpdateOrderDetails) (Written, error) {
	if cmd.CustomerID != nil {
		if err := checkCustomer(ctx, h.dir, cmd.Meta.MerchantID, *cmd.CustomerID); err != nil {
			return Written{}, err
		}
	}
	return h.update(ctx, cmd.OrderTarget, func(o *order.Order) error {
		d := o.Details()
		if cmd.CustomerID != nil {
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
	return h.update(ctx, cmd.OrderTarget, func(o *order.Order) error {
		return o.ChangeStatus(to, cmd.Meta.OccurredAt)
	})
}

// Cancel handles CancelOrder.
func (h OrderHandlers) Cancel(ctx context.Context, cmd CancelOrder) (Written, error) {
	return h.update(ctx, cmd.OrderTarget, func(o *order.Order) error {
		return o.Cancel(cmd.Reason)
	})
}

// Assign handles AssignOrder. The staff member must exist in the merchant
// and be active.
func (h OrderHandlers) Assign(ctx context.Context, cmd AssignOrder) (Written, error) {
	a := order.Assignment{StaffID: cmd.StaffID, StartAt: cmd.StartAt, EndAt: cmd.EndAt, DispatchNote: cmd.DispatchNote}
	if err := a.Validate(); err != nil {
		return Written{}, err
	}
	exists, active, err := h.dir.StaffActive(ctx, cmd.Meta.MerchantID, cmd.StaffID)
	if err != nil {
		return Written{}, err
	}
	if !exists {
		return Written{}, apperr.Invalid("staff_id", "no staff member %s in this merchant", cmd.StaffID)
	}
	if !active {
		return Written{}, &apperr.RuleError{Rule: "order.staff_inactive", Detail: fmt.Sprintf("staff member %s is not active", cmd.StaffID)}
	}
	return h.update(ctx, cmd.OrderTarget, func(o *order.Order) error {
		return o.Assign(a)
	})
}

// Settle handles SettleOrder.
func (h OrderHandlers) Settle(ctx context.Context, cmd SettleOrder) (Written, error) {
	return h.update(ctx, cmd.OrderTarget, func(o *order.Order) error {
		return o.Settle(order.Settlement{
			Status: order.SettlementStatus(cmd.SettlementStatus), PaidAmountCents: cmd.PaidAmountCents,
			PaymentMethod: cmd.PaymentMethod, PaidAt: cmd.PaidAt, Note: cmd.SettlementNote,
		})
	})
}

func statusNames() string {
	names := make([]string, len(order.Statuses))
	for i, s := range order.Statuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}
