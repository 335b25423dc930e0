// Package aggregates is the one list of Hearth's aggregate types and what
// every layer knows about each: the stream type and the event decoder and
// Rehydrate (domain facts, from the aggregate's own package in domain/), and
// the topic, the projection and the read-model table (adapter facts).
//
// It lives here, not in domain/ and not in one adapter, because it composes
// both: domain/ must not know topics or tables (it imports the standard
// library only), and the event store (adapters/pubsub), the read models
// (adapters/readmodel: projections, verify, rebuild, read-your-writes), the
// wiring (cmd/app: projections, parking, telemetry), the HTTP port and the
// bench all read it, so none of them may own it. It imports domain/ only.
//
// A new aggregate is one entry here (and its line in All); every consumer
// above then knows it.
package aggregates

import (
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/plan"
	"hearth/domain/schedule"
	"hearth/domain/servicerequest"
)

// Facts is what the layers know about one aggregate type, whatever its Go
// type.
type Facts struct {
	// Type is the stream type (events.stream_type, change_log.aggregate_type).
	Type string
	// Decode decodes the aggregate's events.
	Decode event.Decoder
	// Topic is the Watermill topic its events are published on.
	Topic string
	// Projection names its projection, which is also the projection's
	// consumer group.
	Projection string
	// Table is the projection's read-model table.
	Table string
}

// Kind is an aggregate type with its domain's Rehydrate, for the store's
// unit of work, which loads aggregates as their Go type A.
type Kind[A any] struct {
	Facts
	// Rehydrate folds a stream's events into the aggregate.
	Rehydrate func([]event.Event) (A, error)
}

// The aggregate types.
var (
	Order = Kind[*order.Order]{Facts: Facts{
		Type: order.StreamType, Decode: order.Decode,
		Topic: "orders", Projection: "orders", Table: "orders",
	}, Rehydrate: order.Rehydrate}
	ServiceRequest = Kind[*servicerequest.Request]{Facts: Facts{
		Type: servicerequest.StreamType, Decode: servicerequest.Decode,
		Topic: "service_requests", Projection: "service_requests", Table: "service_requests",
	}, Rehydrate: servicerequest.Rehydrate}
	Schedule = Kind[*schedule.Schedule]{Facts: Facts{
		Type: schedule.StreamType, Decode: schedule.Decode,
		Topic: "schedules", Projection: "schedules", Table: "schedules",
	}, Rehydrate: schedule.Rehydrate}
	Plan = Kind[*plan.Plan]{Facts: Facts{
		Type: plan.StreamType, Decode: plan.Decode,
		Topic: "plans", Projection: "plans", Table: "plans",
	}, Rehydrate: plan.Rehydrate}
)

// All returns every aggregate type, sorted by projection name.
func All() []Facts { return []Facts{Order.Facts, Plan.Facts, Schedule.Facts, ServiceRequest.Facts} }

// ByType returns the aggregate type of a stream type.
func ByType(streamType string) (Facts, bool) {
	for _, f := range All() {
		if f.Type == streamType {
			return f, true
		}
	}
	return Facts{}, false
}

// Projections returns the projections' names, sorted.
func Projections() []string {
	var names []string
	for _, f := range All() {
		names = append(names, f.Projection)
	}
	return names
}
