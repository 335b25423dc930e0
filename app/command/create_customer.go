package command

import (
	"context"
	"fmt"
	"time"

	"hearth/app/customer"
	"hearth/app/uuid"
)

// CustomerStore stores customers.
type CustomerStore interface {
	CreateCustomer(ctx context.Context, c customer.Customer) error
}

// CreateCustomer adds a customer to a merchant.
type CreateCustomer struct {
	MerchantID string
	Customer   customer.Customer
	Now        time.Time
}

// CreateCustomerHandler handles CreateCustomer.
type CreateCustomerHandler struct {
	store CustomerStore
}

// NewCreateCustomerHandler checks its dependencies.
func NewCreateCustomerHandler(store CustomerStore) (CreateCustomerHandler, error) {
	if err := notNil(map[string]any{"store": store}); err != nil {
		return CreateCustomerHandler{}, fmt.Errorf("NewCreateCustomerHandler: %w", err)
	}
	return CreateCustomerHandler{store: store}, nil
}

// Handle validates and stores the customer and returns it.
func (h CreateCustomerHandler) Handle(ctx context.Context, cmd CreateCustomer) (customer.Customer, error) {
	c := cmd.Customer
	if err := c.Normalize(); err != nil {
		return customer.Customer{}, err
	}
	c.ID, c.MerchantID = uuid.New(), cmd.MerchantID
	c.CreatedAt, c.UpdatedAt = cmd.Now.UTC(), cmd.Now.UTC()
	if err := h.store.CreateCustomer(ctx, c); err != nil {
		return customer.Customer{}, err
	}
	return c, nil
}
