package query

import (
	"context"
	"time"

	"hearth/domain/order"
)

// OrderReadModel is what the order queries need from the read model.
type OrderReadModel interface {
	ReadModel[Order, OrderFilter]
	Changes(ctx context.Context, scope Scope, aggregateType, id string) ([]Change, error)
}

// OrderFilter narrows a list of orders. Zero fields do not filter.
type OrderFilter struct {
	Statuses         []string
	SettlementStatus string
	CustomerID       string
	StaffID          string
	From, To         *time.Time // on scheduled_start_at, [From, To)
}

// Orders answers the order reads: those of every aggregate, and the
// change log.
type Orders struct {
	Reads[Order, OrderFilter]
	rm OrderReadModel
}

// NewOrders checks its dependencies.
func NewOrders(rm OrderReadModel, names Names) (Orders, error) {
	reads, err := newReads("NewOrders", ReadModel[Order, OrderFilter](rm), names,
		nameField[Order]{Customers, func(o *Order) *string { return &o.CustomerID }, func(o *Order) *string { return &o.CustomerName }},
		nameField[Order]{Staff, func(o *Order) *string { return o.StaffID }, func(o *Order) *string { return &o.StaffName }},
	)
	return Orders{Reads: reads, rm: rm}, err
}

// Changes returns an order's change log in version order, or
// apperr.ErrNotFound when the order is not visible to scope.
func (q Orders) Changes(ctx context.Context, scope Scope, id string) ([]Change, error) {
	if _, err := q.rm.Get(ctx, scope, id); err != nil {
		return nil, err
	}
	return q.rm.Changes(ctx, scope, order.StreamType, id)
}
