// Package app is Hearth's application layer: the use cases that change
// state (Commands) and the reads (Queries). It knows no database, HTTP or
// Watermill package.
package app

import (
	"hearth/app/command"
	"hearth/app/query"
)

// Application is what the ports call.
type Application struct {
	Commands Commands
	Queries  Queries
}

// Commands are the state-changing use cases.
type Commands struct {
	CreateCustomer command.CreateCustomerHandler
	CreateOrder    command.CreateOrderHandler
	Orders         command.OrderHandlers
}

// Queries are the reads.
type Queries struct {
	Customers query.Customers
	Orders    query.Orders
}
