package readmodel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/uptrace/bun"

	"hearth/app/query"
	"hearth/domain/event"
	"hearth/internal/aggregates"
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
	agg      aggregates.Facts // projection, table, stream type and decoder
	toRow    func(V) R
	toView   func(R) V
	id       func(V) string
	merchant func(V) string
	version  func(V) int
}

// Projections names the projections that verification and rebuilds know:
// every aggregate type's (internal/aggregates).
func Projections() []string { return aggregates.Projections() }

// The tables of the projections: what projections, verification and
// rebuilds know about each.
var (
	ordersTable = &table[query.Order, *query.Order, orderRow]{
		agg: aggregates.Order.Facts, toRow: orderRowOf, toView: orderRow.view,
		id:       func(v query.Order) string { return v.ID },
		merchant: func(v query.Order) string { return v.MerchantID },
		version:  func(v query.Order) int { return v.Version },
	}
	schedulesTable = &table[query.Schedule, *query.Schedule, scheduleRow]{
		agg: aggregates.Schedule.Facts, toRow: scheduleRowOf, toView: scheduleRow.view,
		id:       func(v query.Schedule) string { return v.ID },
		merchant: func(v query.Schedule) string { return v.MerchantID },
		version:  func(v query.Schedule) int { return v.Version },
	}
	plansTable = &table[query.Plan, *query.Plan, planRow]{
		agg: aggregates.Plan.Facts, toRow: planRowOf, toView: planRow.view,
		id:       func(v query.Plan) string { return v.ID },
		merchant: func(v query.Plan) string { return v.MerchantID },
		version:  func(v query.Plan) int { return v.Version },
	}
	serviceRequestsTable = &table[query.ServiceRequest, *query.ServiceRequest, serviceRequestRow]{
		agg: aggregates.ServiceRequest.Facts, toRow: serviceRequestRowOf, toView: serviceRequestRow.view,
		id:       func(v query.ServiceRequest) string { return v.ID },
		merchant: func(v query.ServiceRequest) string { return v.MerchantID },
		version:  func(v query.ServiceRequest) int { return v.Version },
	}
)

func targets() []target {
	return []target{ordersTable, plansTable, schedulesTable, serviceRequestsTable}
}

// target is a table whatever its types.
type target interface {
	projectionName() string
	projector(db *bun.DB, refold Refold) Projector
	// rowTable is the table the Bun row model names in its tag, which
	// must be the registry's (a test checks).
	rowTable() string
	verify(ctx context.Context, v *verifier) error
	rebuild(ctx context.Context, rb *rebuilder) error
}

func (t *table[V, PV, R]) projectionName() string { return t.agg.Projection }

func (t *table[V, PV, R]) projector(db *bun.DB, refold Refold) Projector {
	p := newProjection(db, t)
	p.refold = refold
	return p
}

func (t *table[V, PV, R]) rowTable() string {
	f, _ := reflect.TypeFor[R]().FieldByName("BaseModel")
	for _, part := range strings.Split(f.Tag.Get("bun"), ",") {
		if name, ok := strings.CutPrefix(part, "table:"); ok {
			return name
		}
	}
	return ""
}

// Projector is one aggregate type's projection, whatever its view: what
// the pipeline runs (projector.ProjectionOf).
type Projector interface {
	Aggregate() aggregates.Facts
	Apply(ctx context.Context, r event.Recorded) error
	ApplyBatch(ctx context.Context, recs []event.Recorded, alsoInTx func(ctx context.Context, tx bun.Tx) error) error
	ForgetParked(ctx context.Context, r event.Recorded) error
}

// NewProjectors returns the projection of every aggregate type, on the
// read model db, in the order of aggregates.All; refold is how they forget
// an erased subject.
func NewProjectors(db *bun.DB, refold Refold) ([]Projector, error) {
	if db == nil || refold.Log == nil {
		return nil, errors.New("readmodel.NewProjectors: db and refold.Log are required")
	}
	var ps []Projector
	for _, t := range targets() {
		ps = append(ps, t.projector(db, refold))
	}
	return ps, nil
}

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
		if u, ok := r.Event.(undecodable); ok {
			return v, fmt.Errorf("fold %s %s v%d: the event does not decode: %w", t.agg.Type, r.StreamID, r.Version, u.err)
		}
		if err := PV(&v).Apply(r); err != nil {
			return v, fmt.Errorf("fold %s %s v%d: %w", t.agg.Type, r.StreamID, r.Version, err)
		}
	}
	return v, nil
}

// rows reads the rows of the given ids from table name.
func (t *table[V, PV, R]) rows(ctx context.Context, db bun.IDB, ids []string) (map[string]V, error) {
	var rows []R
	if err := db.NewSelect().Model(&rows).Where("id IN (?)", bun.In(ids)).Scan(ctx); err != nil {
		return nil, fmt.Errorf("read %s rows: %w", t.agg.Table, err)
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
	err := db.NewSelect().Model(&rows).Where("aggregate_type = ? AND aggregate_id IN (?)", t.agg.Type, bun.In(ids)).
		OrderExpr("aggregate_id, version").Scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("read change log of %s: %w", t.agg.Table, err)
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
