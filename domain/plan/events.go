package plan

import (
	"time"

	"hearth/domain/civil"
	"hearth/domain/event"
)

// StreamType names the service plan stream in the event store.
const StreamType = "service_plan"

// Created starts a plan's stream.
type Created struct {
	PlanID        string `json:"plan_id"`
	CustomerID    string `json:"customer_id"`
	CatalogItemID string `json:"catalog_item_id"`
	TimeZone      string `json:"time_zone"`
	Terms         Terms  `json:"terms"`
}

// Changed gives the plan new terms from the visit dated From on ("this and
// following"): visits dated before From keep the terms they had.
type Changed struct {
	From  civil.Date `json:"from"`
	Terms Terms      `json:"terms"`
}

// VisitSkipped drops the one visit dated Date.
type VisitSkipped struct {
	Date civil.Date `json:"date"`
}

// VisitMoved moves the one visit dated Date to start at ToStart on ToDate
// (local); it keeps its key, its length and its terms.
type VisitMoved struct {
	Date    civil.Date  `json:"date"`
	ToDate  civil.Date  `json:"to_date"`
	ToStart civil.Clock `json:"to_start"`
}

// Paused stops visits that would start from At on, until Resumed.
type Paused struct {
	At time.Time `json:"at"`
}

// Resumed lets visits start again from At on.
type Resumed struct {
	At time.Time `json:"at"`
}

// Ended stops every visit that would start from At on, for good.
type Ended struct {
	At time.Time `json:"at"`
}

func (Created) EventType() string      { return "ServicePlanCreated" }
func (Changed) EventType() string      { return "ServicePlanChanged" }
func (VisitSkipped) EventType() string { return "ServicePlanVisitSkipped" }
func (VisitMoved) EventType() string   { return "ServicePlanVisitMoved" }
func (Paused) EventType() string       { return "ServicePlanPaused" }
func (Resumed) EventType() string      { return "ServicePlanResumed" }
func (Ended) EventType() string        { return "ServicePlanEnded" }

// The checks of the values every stored event of each type carries
// (event.Checker): ids, the time zone, dates and instants.

func (e Created) Check() error {
	return event.Require(event.Has("plan_id", e.PlanID != ""), event.Has("customer_id", e.CustomerID != ""),
		event.Has("time_zone", e.TimeZone != ""))
}
func (e Changed) Check() error      { return event.Require(event.Has("from", !e.From.IsZero())) }
func (e VisitSkipped) Check() error { return event.Require(event.Has("date", !e.Date.IsZero())) }
func (e VisitMoved) Check() error {
	return event.Require(event.Has("date", !e.Date.IsZero()), event.Has("to_date", !e.ToDate.IsZero()))
}
func (e Paused) Check() error  { return event.Require(event.Has("at", !e.At.IsZero())) }
func (e Resumed) Check() error { return event.Require(event.Has("at", !e.At.IsZero())) }
func (e Ended) Check() error   { return event.Require(event.Has("at", !e.At.IsZero())) }

// EventTypes returns the stored type names of its events, sorted.
func EventTypes() []string { return registry.Types() }

// Decode turns a stored plan event back into its type.
func Decode(eventType string, data []byte, more ...[]byte) (event.Event, error) {
	return registry.Decode(eventType, data, more...)
}

var registry = event.Registry{
	"ServicePlanCreated":      event.As[Created],
	"ServicePlanChanged":      event.As[Changed],
	"ServicePlanVisitSkipped": event.As[VisitSkipped],
	"ServicePlanVisitMoved":   event.As[VisitMoved],
	"ServicePlanPaused":       event.As[Paused],
	"ServicePlanResumed":      event.As[Resumed],
	"ServicePlanEnded":        event.As[Ended],
}
