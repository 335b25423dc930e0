// Package command holds Hearth's use cases that change state: one file per
// use case, each with its command type, its handler and Handle. Handlers
// decide through the aggregates and persist through the interfaces declared
// here, which adapters implement.
package command

import (
	"context"
	"errors"

	"hearth/app/apperr"
	"hearth/app/event"
	"hearth/app/order"
)

// OrderRepository loads and stores orders. Update loads the order of
// meta.MerchantID (apperr.ErrNotFound when it has none with that id), checks
// expectedVersion when it is given (a mismatch is an *apperr.ConflictError),
// lets fn decide, and appends and publishes fn's events in one transaction.
// A concurrent append to the same order makes exactly one writer win; the
// other gets an *apperr.ConflictError.
type OrderRepository interface {
	Create(ctx context.Context, meta event.Meta, o *order.Order) (Written, error)
	Update(ctx context.Context, meta event.Meta, id string, expectedVersion *int, fn func(o *order.Order) error) (Written, error)
}

// Directory answers whether reference data exists for a merchant.
type Directory interface {
	CustomerExists(ctx context.Context, merchantID, id string) (bool, error)
	// StaffActive reports whether the staff member exists and whether it is active.
	StaffActive(ctx context.Context, merchantID, id string) (exists, active bool, err error)
}

// Written is what a command on one stream left behind.
type Written struct {
	Stream   []event.Recorded // the whole stream after the command, in version order
	Appended int              // events this command appended; 0 when it changed nothing
	Position int64            // store position of the stream's last event
}

func checkCustomer(ctx context.Context, dir Directory, merchantID, customerID string) error {
	ok, err := dir.CustomerExists(ctx, merchantID, customerID)
	if err != nil {
		return err
	}
	if !ok {
		return apperr.Invalid("customer_id", "no customer %s in this merchant", customerID)
	}
	return nil
}

func notNil(names map[string]any) error {
	var errs []error
	for name, v := range names {
		if v == nil {
			errs = append(errs, errors.New(name+" is nil"))
		}
	}
	return errors.Join(errs...)
}
