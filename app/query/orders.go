package query

import (
	"context"
	"errors"
	"time"
)

// OrderReadModel is what the order queries need from the read model.
type OrderReadModel interface {
	Order(ctx context.Context, scope Scope, id string) (Order, error)
	Orders(ctx context.Context, scope Scope, f OrderFilter, p Page) ([]Order, int, error)
	Changes(ctx context.Context, scope Scope, aggregateType, id string) ([]Change, error)
}

// OrderFilter narrows GET /v1/orders. Zero fields do not filter.
type OrderFilter struct {
	Statuses         []string
	SettlementStatus string
	CustomerID       string
	StaffID          string
	From, To         *time.Time // on scheduled_start_at, [From, To)
}

// Orders answers the order reads.
type Orders struct {
	rm    OrderReadModel
	names Names
}

// NewOrders checks its dependencies.
func NewOrders(rm OrderReadModel, names Names) (Orders, error) {
	if rm == nil || names == nil {
		return Orders{}, errors.New("query.NewOrders: nil dependency")
	}
	return Orders{rm: rm, names: names}, nil
}

// Get returns one order, or apperr.ErrNotFound.
func (q Orders) Get(ctx context.Context, scope Scope, id string) (Order, error) {
	o, err := q.rm.Order(ctx, scope, id)
	if err != nil {
		return Order{}, err
	}
	return q.Named(ctx, scope, o)
}

// Named fills the names an order shows (customer, staff), from its
// merchant only.
func (q Orders) Named(ctx context.Context, scope Scope, o Order) (Order, error) {
	items := []Order{o}
	err := q.join(ctx, scope, items)
	return items[0], err
}

// List returns a page of orders, newest first (by scheduled start when a
// time range is given).
func (q Orders) List(ctx context.Context, scope Scope, f OrderFilter, p Page) (List[Order], error) {
	items, total, err := q.rm.Orders(ctx, scope, f, p)
	if err != nil {
		return List[Order]{}, err
	}
	if err := q.join(ctx, scope, items); err != nil {
		return List[Order]{}, err
	}
	return newList(items, total, p), nil
}

func (q Orders) join(ctx context.Context, scope Scope, items []Order) error {
	return joinNames(ctx, q.names, scope.MerchantID, items,
		nameField[Order]{Customers, func(o *Order) *string { return &o.CustomerID }, func(o *Order) *string { return &o.CustomerName }},
		nameField[Order]{Staff, func(o *Order) *string { return o.StaffID }, func(o *Order) *string { return &o.StaffName }},
	)
}

// Changes returns an order's change log in version order, or
// apperr.ErrNotFound when the order is not visible to scope.
func (q Orders) Changes(ctx context.Context, scope Scope, id string) ([]Change, error) {
	if _, err := q.rm.Order(ctx, scope, id); err != nil {
		return nil, err
	}
	return q.rm.Changes(ctx, scope, "order", id)
}
