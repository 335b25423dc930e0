package command

import (
	"context"
	"fmt"
	"time"

	"hearth/app/event"
	"hearth/app/order"
	"hearth/app/uuid"
)

// CreateOrder creates an order for an existing customer.
type CreateOrder struct {
	Meta             event.Meta
	OrderID          string // empty: a new id
	RequestID        string
	CustomerID       string
	AmountCents      int64
	Notes            string
	ScheduledStartAt *time.Time
	ScheduledEndAt   *time.Time
}

// CreateOrderHandler handles CreateOrder.
type CreateOrderHandler struct {
	repo OrderRepository
	dir  Directory
}

// NewCreateOrderHandler checks its dependencies.
func NewCreateOrderHandler(repo OrderRepository, dir Directory) (CreateOrderHandler, error) {
	if err := notNil(map[string]any{"repo": repo, "dir": dir}); err != nil {
		return CreateOrderHandler{}, fmt.Errorf("NewCreateOrderHandler: %w", err)
	}
	return CreateOrderHandler{repo: repo, dir: dir}, nil
}

// Handle decides the new order and stores it.
func (h CreateOrderHandler) Handle(ctx context.Context, cmd CreateOrder) (Written, error) {
	if cmd.OrderID == "" {
		cmd.OrderID = uuid.New()
	}
	o, err := order.New(order.NewOrder{
		ID: cmd.OrderID, RequestID: cmd.RequestID, CustomerID: cmd.CustomerID,
		AmountCents: cmd.AmountCents, Notes: cmd.Notes,
		ScheduledStartAt: cmd.ScheduledStartAt, ScheduledEndAt: cmd.ScheduledEndAt,
	})
	if err != nil {
		return Written{}, err
	}
	if err := checkCustomer(ctx, h.dir, cmd.Meta.MerchantID, cmd.CustomerID); err != nil {
		return Written{}, err
	}
	return h.repo.Create(ctx, cmd.Meta, o)
}
