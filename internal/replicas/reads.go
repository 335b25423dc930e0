package replicas

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"hearth/app/query"
)

// Routed is one read model (or reference-data reader) built on the primary
// and on each replica of a Set; each call goes to the server the GET's
// choice names (Router.Route), the primary without one. A call a replica
// fails to answer (unreachable) is made again on the primary, the replica
// is skipped until its next check, and the rest of the GET reads the
// primary.
type Routed[T any] struct {
	set     *Set
	primary T
	on      map[*Replica]T
	m       *Metrics
}

// Each builds T on primary and on each replica of s (nil: the primary
// only) with build.
func Each[T any](s *Set, m *Metrics, primary *bun.DB, build func(db *bun.DB) (T, error)) (Routed[T], error) {
	p, err := build(primary)
	if err != nil {
		return Routed[T]{}, err
	}
	rt := Routed[T]{set: s, primary: p, on: map[*Replica]T{}, m: m}
	if s == nil {
		return rt, nil
	}
	for _, rep := range s.members {
		v, err := build(rep.db)
		if err != nil {
			return rt, fmt.Errorf("read replica %s: %w", rep.Name, err)
		}
		rt.on[rep] = v
	}
	return rt, nil
}

// call runs f on the server of ctx's choice, or on the primary.
func call[T, R any](ctx context.Context, rt Routed[T], f func(context.Context, T) (R, error)) (R, error) {
	c := choiceOf(ctx)
	if c == nil { // not a routed GET: no count, as without replicas
		return f(ctx, rt.primary)
	}
	rep := c.replica(rt.set)
	if rep == nil {
		rt.m.reads.WithLabelValues(Primary).Inc()
		return f(ctx, rt.primary)
	}
	// A replica that went silent between two checks (its machine frozen:
	// its kernel still answers TCP, and its statement_timeout is its own)
	// would hold the read until the request's deadline: it gets a bound of
	// its own, and the primary the time left.
	rctx, cancel := context.WithTimeout(ctx, rt.set.callBound(ctx))
	v, err := f(rctx, rt.on[rep])
	silent := err != nil && rctx.Err() != nil
	cancel()
	if err != nil && ctx.Err() == nil && (unreachable(err) || silent) {
		rt.set.skip(rep, err)
		c.primary = true
		rt.m.reads.WithLabelValues(Primary).Inc()
		return f(ctx, rt.primary)
	}
	rt.m.reads.WithLabelValues(rep.Name).Inc()
	return v, err
}

// ReadModel routes an aggregate's read model.
func ReadModel[V, F any](rt Routed[query.ReadModel[V, F]]) query.ReadModel[V, F] {
	return readModel[V, F]{rt}
}

type readModel[V, F any] struct{ rt Routed[query.ReadModel[V, F]] }

func (r readModel[V, F]) Get(ctx context.Context, scope query.Scope, id string) (V, error) {
	return call(ctx, r.rt, func(ctx context.Context, rm query.ReadModel[V, F]) (V, error) { return rm.Get(ctx, scope, id) })
}

func (r readModel[V, F]) List(ctx context.Context, scope query.Scope, f F, p query.Page) (query.List[V], error) {
	return call(ctx, r.rt, func(ctx context.Context, rm query.ReadModel[V, F]) (query.List[V], error) {
		return rm.List(ctx, scope, f, p)
	})
}

// Orders routes the orders' read model, change log included.
func Orders(rt Routed[query.OrderReadModel]) query.OrderReadModel { return orders{rt} }

type orders struct{ rt Routed[query.OrderReadModel] }

func (o orders) Get(ctx context.Context, scope query.Scope, id string) (query.Order, error) {
	return call(ctx, o.rt, func(ctx context.Context, rm query.OrderReadModel) (query.Order, error) { return rm.Get(ctx, scope, id) })
}

func (o orders) List(ctx context.Context, scope query.Scope, f query.OrderFilter, p query.Page) (query.List[query.Order], error) {
	return call(ctx, o.rt, func(ctx context.Context, rm query.OrderReadModel) (query.List[query.Order], error) {
		return rm.List(ctx, scope, f, p)
	})
}

func (o orders) Changes(ctx context.Context, scope query.Scope, aggregateType, id string) ([]query.Change, error) {
	return call(ctx, o.rt, func(ctx context.Context, rm query.OrderReadModel) ([]query.Change, error) {
		return rm.Changes(ctx, scope, aggregateType, id)
	})
}

// Records routes a kind of reference record.
func Records[T any](rt Routed[query.RecordReader[T]]) query.RecordReader[T] { return records[T]{rt} }

type records[T any] struct{ rt Routed[query.RecordReader[T]] }

func (r records[T]) Get(ctx context.Context, merchantID, id string) (T, error) {
	return call(ctx, r.rt, func(ctx context.Context, rm query.RecordReader[T]) (T, error) { return rm.Get(ctx, merchantID, id) })
}

func (r records[T]) List(ctx context.Context, merchantID, q string, p query.Page) (query.List[T], error) {
	return call(ctx, r.rt, func(ctx context.Context, rm query.RecordReader[T]) (query.List[T], error) {
		return rm.List(ctx, merchantID, q, p)
	})
}

// Names routes the lookup of reference names.
func Names(rt Routed[query.Names]) query.Names { return names{rt} }

type names struct{ rt Routed[query.Names] }

func (n names) Names(ctx context.Context, merchantID string, kind query.NameKind, ids []string) (map[string]string, error) {
	return call(ctx, n.rt, func(ctx context.Context, rm query.Names) (map[string]string, error) {
		return rm.Names(ctx, merchantID, kind, ids)
	})
}
