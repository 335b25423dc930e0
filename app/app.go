// Package app is Hearth's application layer: the use cases that change
// state (Commands) and the reads (Queries). It knows no database, HTTP or
// Watermill package.
package app

import (
	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/reference"
)

// Application is what the ports call.
type Application struct {
	Commands Commands
	Queries  Queries
}

// Commands are the state-changing use cases.
type Commands struct {
	Customers       command.Records[reference.Customer, *reference.Customer]
	Staff           command.Records[reference.StaffMember, *reference.StaffMember]
	CatalogItems    command.Records[reference.CatalogItem, *reference.CatalogItem]
	Orders          command.OrderHandlers
	ServiceRequests command.ServiceRequestHandlers
	Schedules       command.ScheduleHandlers
	Plans           command.PlanHandlers
	Calendar        command.Calendar
	Webhooks        command.Webhooks
}

// Queries are the reads.
type Queries struct {
	Customers       query.Records[reference.Customer]
	Staff           query.Records[reference.StaffMember]
	CatalogItems    query.Records[reference.CatalogItem]
	Orders          query.Orders
	ServiceRequests query.ServiceRequests
	Schedules       query.Schedules
	Plans           query.Plans
	PlanVisits      query.PlanVisits
	Calendar        query.Calendar
	Webhooks        query.Webhooks
	// Events is the event feed (GET /v1/events).
	Events query.Feed
}
