package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"hearth/adapters/pubsub/projector"
	"hearth/adapters/readmodel"
	"hearth/domain/event"
	"hearth/internal/advisory"
	"hearth/internal/database"
	"hearth/leader"
)

// projectorAppName prefixes the application_name of the event-store
// sessions of a projection's term (its subscribers and poison publisher):
// "hearth-projector/orders". The next leader of that projection ends any it
// finds (leader.Unit.FenceAppName), so a frozen or cut-off leader's open
// subscriber transactions cannot hold the offsets, or pg_snapshot_xmin,
// for longer than it takes to notice; the other projections' sessions,
// which other workers may lead, are left alone.
const projectorAppName = "hearth-projector"

func projectionSessions(projection string) string { return projectorAppName + "/" + projection }

// projectionLive is, for one projection, the term it runs live under on
// this instance (caught up, router running); 0 when none.
type projectionLive struct {
	projection string
	term       atomic.Int64
}

// liveByUnit makes the live state of each projection, by its unit's lock
// name.
func liveByUnit(projections []projector.Projection) map[string]*projectionLive {
	out := map[string]*projectionLive{}
	for _, p := range projections {
		out[advisory.Projection(p.Name)] = &projectionLive{projection: p.Name}
	}
	return out
}

// newScheduler builds the leadership scheduler: one unit per projection,
// each with its own lock on the event store and its own fencing term in the
// read model, and the other leader-only work (extra: the relay, webhook
// delivery), so that the workers share it all.
func newScheduler(cfg Config, dbs databases, w wiring, log *slog.Logger, extra ...leader.Unit) (*leader.Scheduler, error) {
	var s *leader.Scheduler
	var units []leader.Unit
	for _, p := range w.projections {
		units = append(units, leader.Unit{
			Name:         advisory.Projection(p.Name),
			Guard:        advisory.Projections,
			FenceAppName: projectionSessions(p.Name),
			Lead: func(ctx context.Context, term int64) error {
				return leadProjection(ctx, term, cfg, s.Lease(), w, p, log)
			},
		})
	}
	units = append(units, extra...)
	s, err := leader.NewScheduler(leader.SchedulerConfig{
		// The lease is set, not defaulted, because extra units fence with
		// leader.DefaultLease before the Scheduler exists.
		Config: leader.Config{ConnString: cfg.DatabaseURL, TermDB: dbs.rm.DB, Holder: w.holder, Lease: leader.DefaultLease, Log: log},
		Units:  units,
	})
	return s, err
}

// leadProjection runs one projection for one term of its unit until ctx
// ends: on an event-store pool of the term's own, with every projection
// transaction checking the term against the projection's own term row, and
// stepping down (returning the error) as soon as one finds it stale.
func leadProjection(ctx context.Context, term int64, cfg Config, lease time.Duration, w wiring, p projector.Projection, log *slog.Logger) error {
	es, err := database.OpenSQL(ctx, cfg.DatabaseURL, 6, projectionSessions(p.Name))
	if err != nil {
		return fmt.Errorf("open projector pool: %w", err)
	}
	defer es.Close()
	ctx, stepDown := context.WithCancelCause(ctx)
	defer stepDown(nil)
	unit := advisory.Projection(p.Name)
	ctx = readmodel.WithFence(ctx, readmodel.Fence{Lock: unit, Term: term, Lease: lease})
	live := w.live[unit]
	defer live.term.Store(0)
	err = runProjections(ctx, cfg, es, w, stepDownOnStaleTerm([]projector.Projection{p}, stepDown),
		log.With("projection", p.Name, "term", term), func() { live.term.Store(term) })
	if cause := context.Cause(ctx); errors.Is(cause, readmodel.ErrStaleTerm) {
		return cause
	}
	return err
}

// stepDownOnStaleTerm wraps each projection so that ErrStaleTerm cancels
// the term's context at once: the router stops, and the message is neither
// retried nor poisoned (its context is done), so the next leader gets it.
func stepDownOnStaleTerm(projections []projector.Projection, stepDown context.CancelCauseFunc) []projector.Projection {
	out := slices.Clone(projections)
	watch := func(err error) error {
		if errors.Is(err, readmodel.ErrStaleTerm) {
			stepDown(err)
		}
		return err
	}
	for i, p := range out {
		apply, applyBatch := p.Apply, p.ApplyBatch
		out[i].Apply = func(ctx context.Context, r event.Recorded) error { return watch(apply(ctx, r)) }
		if applyBatch != nil {
			out[i].ApplyBatch = func(ctx context.Context, recs []event.Recorded, alsoInTx func(context.Context, bun.Tx) error) error {
				return watch(applyBatch(ctx, recs, alsoInTx))
			}
		}
	}
	return out
}

// schedulerDetails is what /readyz (admin) and /admin/leadership show of
// this worker: its name, the live workers, its fair share, how many units
// it leads, and each unit's role, term and since (with unit, which may add
// to each unit's entry).
func schedulerDetails(s *leader.Scheduler, unit func(leader.UnitStatus, map[string]any)) map[string]any {
	st := s.Status()
	units := make([]any, 0, len(st.Units)) // []any, as from JSON: the console reads it so
	for _, u := range st.Units {
		d := map[string]any{"name": u.Name, "role": u.Role, "term": u.Term, "since": u.Since.UTC().Format(time.RFC3339Nano)}
		unit(u, d)
		units = append(units, d)
	}
	return map[string]any{"holder": st.Holder, "workers": st.Workers, "fair_share": st.FairShare, "leading": st.Leading, "units": units}
}

// readiness reports for /readyz the mode and, in worker and all modes, what
// this instance leads: per unit, its role, term and since, and for a
// projection it leads whether it is catching up or live.
func readiness(cfg Config, dbs databases, s *leader.Scheduler, live map[string]*projectionLive) func(context.Context) (map[string]any, error) {
	return func(ctx context.Context) (map[string]any, error) {
		details := map[string]any{"mode": cfg.Mode}
		if s != nil {
			details = schedulerDetails(s, func(u leader.UnitStatus, d map[string]any) {
				l, ok := live[u.Name]
				if !ok {
					return
				}
				d["projection"] = l.projection
				if u.Role == leader.RoleLeader {
					d["state"] = "catching_up"
					if l.term.Load() == u.Term {
						d["state"] = "live"
					}
				}
			})
			details["mode"] = cfg.Mode
		}
		if err := dbs.es.PingContext(ctx); err != nil {
			return details, fmt.Errorf("event store: %w", err)
		}
		if err := dbs.rm.PingContext(ctx); err != nil {
			return details, fmt.Errorf("read model: %w", err)
		}
		return details, nil
	}
}

// leadership reports for GET /admin/leadership what this worker leads and,
// for each unit, the current term as the read model records it: its
// holder, the worker that leads it; nil in api mode, which takes no part in
// leadership.
func leadership(s *leader.Scheduler) func(context.Context) (map[string]any, error) {
	if s == nil {
		return nil
	}
	return func(ctx context.Context) (map[string]any, error) {
		current, err := s.CurrentTerms(ctx)
		if err != nil {
			return nil, err
		}
		return schedulerDetails(s, func(u leader.UnitStatus, d map[string]any) {
			if cur, ok := current[u.Name]; ok {
				d["current"] = map[string]any{"term": cur.Term, "holder": cur.Holder, "since": cur.Since.UTC().Format(time.RFC3339Nano)}
			}
		}), nil
	}
}
