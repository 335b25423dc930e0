package readmodel

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/uptrace/bun"

	"hearth/app/event"
	"hearth/app/order"
	"hearth/app/query"
	"hearth/app/schedule"
	"hearth/app/servicerequest"
)

// EventLog reads the event store back, stream by stream, for verification
// and rebuilds (pubsub.EventLog). Events skipped in a projection come back
// as event.Skipped, as that projection applied them.
type EventLog interface {
	// Count returns how many events of streamType the log holds.
	Count(ctx context.Context, streamType string) (int64, error)
	// Scan calls fn with every stream of streamType in stream-id order,
	// its events in version order.
	Scan(ctx context.Context, projection, streamType string, decode event.Decoder, fn func(stream []event.Recorded) error) error
	// Streams returns the given streams, each in version order.
	Streams(ctx context.Context, projection, streamType string, decode event.Decoder, ids []string) (map[string][]event.Recorded, error)
}

// table describes one projection's read-model table to verification and
// rebuilds: V is the view (the fold), R the Bun row model.
type table[V any, PV interface {
	*V
	View
}, R any] struct {
	projection string // projection and consumer-group name
	name       string // table name
	streamType string // stream type, also change_log.aggregate_type
	decode     event.Decoder
	toRow      func(V) R
	toView     func(R) V
	id         func(V) string
	merchant   func(V) string
	version    func(V) int
}

// Projections names the projections that verification and rebuilds know.
func Projections() []string { return []string{"orders", "schedules", "service_requests"} }

// The tables of the three projections: what projections, verification and
// rebuilds know about each.
var (
	ordersTable = &table[query.Order, *query.Order, orderRow]{
		projection: "orders", name: "orders", streamType: order.StreamType, decode: order.Decode,
		toRow: orderRowOf, toView: orderRow.view,
		id:       func(v query.Order) string { return v.ID },
		merchant: func(v query.Order) string { return v.MerchantID },
		version:  func(v query.Order) int { return v.Version },
	}
	schedulesTable = &table[query.Schedule, *query.Schedule, scheduleRow]{
		projection: "schedules", name: "schedules", streamType: schedule.StreamType, decode: schedule.Decode,
		toRow: scheduleRowOf, toView: scheduleRow.view,
		id:       func(v query.Schedule) string { return v.ID },
		merchant: func(v query.Schedule) string { return v.MerchantID },
		version:  func(v query.Schedule) int { return v.Version },
	}
	serviceRequestsTable = &table[query.ServiceRequest, *query.ServiceRequest, serviceRequestRow]{
		projection: "service_requests", name: "service_requests", streamType: servicerequest.StreamType,
		decode: servicerequest.Decode, toRow: serviceRequestRowOf, toView: serviceRequestRow.view,
		id:       func(v query.ServiceRequest) string { return v.ID },
		merchant: func(v query.ServiceRequest) string { return v.MerchantID },
		version:  func(v query.ServiceRequest) int { return v.Version },
	}
)

func targets() []target {
	return []target{ordersTable, schedulesTable, serviceRequestsTable}
}

// target is a table whatever its types.
type target interface {
	projectionName() string
	verify(ctx context.Context, v *verifier) error
	rebuild(ctx context.Context, rb *rebuilder) error
}

func (t *table[V, PV, R]) projectionName() string { return t.projection }

// selectTargets returns the targets of the named projections (all when
// none is named).
func selectTargets(names []string) ([]target, error) {
	all := targets()
	if len(names) == 0 {
		return all, nil
	}
	var out []target
	for _, n := range names {
		i := slices.IndexFunc(all, func(t target) bool { return t.projectionName() == n })
		if i < 0 {
			return nil, fmt.Errorf("unknown projection %q; one of %s", n, strings.Join(Projections(), ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// fold folds a stream into a view; upTo > 0 stops after that version.
func (t *table[V, PV, R]) fold(stream []event.Recorded, upTo int) (V, error) {
	var v V
	for _, r := range stream {
		if upTo > 0 && r.Version > upTo {
			break
		}
		if err := PV(&v).Apply(r); err != nil {
			return v, fmt.Errorf("fold %s %s v%d: %w", t.streamType, r.StreamID, r.Version, err)
		}
	}
	return v, nil
}

// rows reads the rows of the given ids from table name.
func (t *table[V, PV, R]) rows(ctx context.Context, db bun.IDB, ids []string) (map[string]V, error) {
	var rows []R
	if err := db.NewSelect().Model(&rows).Where("id IN (?)", bun.In(ids)).Scan(ctx); err != nil {
		return nil, fmt.Errorf("read %s rows: %w", t.name, err)
	}
	out := make(map[string]V, len(rows))
	for _, r := range rows {
		v := t.toView(r)
		out[t.id(v)] = v
	}
	return out, nil
}

// changes reads the change-log rows of the given aggregates, in version
// order.
func (t *table[V, PV, R]) changes(ctx context.Context, db bun.IDB, ids []string) (map[string][]changeRow, error) {
	var rows []changeRow
	err := db.NewSelect().Model(&rows).Where("aggregate_type = ? AND aggregate_id IN (?)", t.streamType, bun.In(ids)).
		OrderExpr("aggregate_id, version").Scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("read change log of %s: %w", t.name, err)
	}
	out := map[string][]changeRow{}
	for _, r := range rows {
		out[r.AggregateID] = append(out[r.AggregateID], r)
	}
	return out, nil
}

// sameJSON reports whether two JSON documents are equal as values (key
// order and spacing aside; jsonb reorders keys).
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
