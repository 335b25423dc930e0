package query

import (
	"context"
	"errors"

	"hearth/app/customer"
)

// CustomerReadModel is what the customer queries need.
type CustomerReadModel interface {
	Customer(ctx context.Context, merchantID, id string) (customer.Customer, error)
	Customers(ctx context.Context, merchantID, q string, p Page) ([]customer.Customer, int, error)
}

// Customers answers the customer reads.
type Customers struct {
	rm CustomerReadModel
}

// NewCustomers checks its dependency.
func NewCustomers(rm CustomerReadModel) (Customers, error) {
	if rm == nil {
		return Customers{}, errors.New("query.NewCustomers: nil read model")
	}
	return Customers{rm: rm}, nil
}

// Get returns one customer, or apperr.ErrNotFound.
func (q Customers) Get(ctx context.Context, merchantID, id string) (customer.Customer, error) {
	return q.rm.Customer(ctx, merchantID, id)
}

// List returns a page of customers, newest first; q matches the name.
func (q Customers) List(ctx context.Context, merchantID, search string, p Page) (List[customer.Customer], error) {
	items, total, err := q.rm.Customers(ctx, merchantID, search, p)
	if err != nil {
		return List[customer.Customer]{}, err
	}
	if items == nil {
		items = []customer.Customer{}
	}
	return List[customer.Customer]{Items: items, Total: total, Page: p.Number, PageSize: p.Size}, nil
}
