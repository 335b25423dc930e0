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
	// Decode decodes the aggregate's events as stored, sealed fields left
	// sealed: readers decode through a Decoders (the vault's) instead.
	Decode event.Decoder
	// Personal names, by stored event type, the fields that hold personal
	// data of the aggregate's customer (sealed at rest: adapters/vault).
	Personal map[string][]string
	// Closing names the stored event types that close the aggregate's work
	// and must carry personal text (an order's cancellation, its reason):
	// written for an erased customer all the same, their text sealed away
	// at once (adapters/vault.SealErased), since work nobody can do any more
	// must be closable.
	Closing map[string]bool
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
		Type: order.StreamType, Decode: order.Decode, Personal: order.Personal, Closing: order.Closing,
		Topic: "orders", Projection: "orders", Table: "orders",
	}, Rehydrate: order.Rehydrate}
	ServiceRequest = Kind[*servicerequest.Request]{Facts: Facts{
		Type: servicerequest.StreamType, Decode: servicerequest.Decode, Personal: servicerequest.Personal,
		Topic: "service_requests", Projection: "service_requests", Table: "service_requests",
	}, Rehydrate: servicerequest.Rehydrate}
	Schedule = Kind[*schedule.Schedule]{Facts: Facts{
		Type: schedule.StreamType, Decode: schedule.Decode, Personal: schedule.Personal,
		Topic: "schedules", Projection: "schedules", Table: "schedules",
	}, Rehydrate: schedule.Rehydrate}
	Plan = Kind[*plan.Plan]{Facts: Facts{
		Type: plan.StreamType, Decode: plan.Decode,
		Topic: "plans", Projection: "plans", Table: "plans",
	}, Rehydrate: plan.Rehydrate}
)

// Subjects are the data subjects' own streams (event.SubjectStreamType):
// not an aggregate with a read model, but a topic whose events (the public
// customer.erased and staff_member.erased) the outbound consumers, the
// webhook fan-out and the relay, carry like the aggregates'.
var Subjects = Facts{Type: event.SubjectStreamType, Decode: event.DecodeSubject, Topic: "data_subjects", Projection: "data_subjects"}

// Outbound returns the aggregate types and Subjects: what the event feed,
// webhooks and the relay carry.
func Outbound() []Facts { return append(All(), Subjects) }

// All returns every aggregate type, sorted by projection name.
func All() []Facts { return []Facts{Order.Facts, Plan.Facts, Schedule.Facts, ServiceRequest.Facts} }

// ByType returns the aggregate type of a stream type.
func ByType(streamType string) (Facts, bool) { return byType(All(), streamType) }

// OutboundByType is ByType among Outbound: an aggregate type, or Subjects.
func OutboundByType(streamType string) (Facts, bool) { return byType(Outbound(), streamType) }

func byType(among []Facts, streamType string) (Facts, bool) {
	for _, f := range among {
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

// Decoders gives the decoder every reader of stored events uses for an
// aggregate type: the vault's (adapters/vault), which opens sealed fields,
// or Plain, which leaves them sealed (for tests and the bench's baseline).
type Decoders interface {
	Decoder(Facts) event.Decoder
	// Erasing is Decoder reading subject's sealed fields as erased, whatever
	// is cached: what a read model re-folds a stream with when it meets
	// the subject's PersonalDataErased.
	Erasing(f Facts, subject string) event.Decoder
}

// Plain decodes events as stored.
var Plain Decoders = plain{}

type plain struct{}

func (plain) Decoder(f Facts) event.Decoder           { return f.Decode }
func (plain) Erasing(f Facts, _ string) event.Decoder { return f.Decode }

// Or returns d, or Plain when d is nil.
func Or(d Decoders) Decoders {
	if d == nil {
		return Plain
	}
	return d
}
