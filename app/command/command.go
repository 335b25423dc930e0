// Package command holds Hearth's use cases that change state: one file per
// use case, each with its command type, its handler and Handle. Handlers
// decide through the aggregates and persist through the interfaces declared
// here, which adapters implement.
package command

import (
	"context"

	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/uuid"
)

// Written is what a command on one stream left behind.
type Written struct {
	Stream   []event.Recorded // the whole stream after the command, in version order
	Appended int              // events this command appended; 0 when it changed nothing
	Position int64            // store position of the stream's last event
	// Names are the names of the reference records the command read, by
	// id, so that its response need not look them up again.
	Names map[string]string
}

// checkCustomer checks that the merchant has the customer, and returns its
// name.
func checkCustomer(ctx context.Context, s Session, customerID string) (name string, err error) {
	if !uuid.Valid(customerID) {
		return "", apperr.Invalid("customer_id", "must be a UUID")
	}
	name, found, err := s.Customer(ctx, customerID)
	if err != nil {
		return "", err
	}
	if !found {
		return "", NoCustomer(customerID)
	}
	return name, nil
}

// requireCustomer is checkCustomer through Session.RequireCustomer: the
// check goes with the commit.
func requireCustomer(s Session, customerID string) error {
	if !uuid.Valid(customerID) {
		return apperr.Invalid("customer_id", "must be a UUID")
	}
	s.RequireCustomer(customerID)
	return nil
}

// NoCustomer is the error of a command naming a customer the merchant does
// not have.
func NoCustomer(customerID string) error {
	return apperr.Invalid("customer_id", "no customer %s in this merchant", customerID)
}
