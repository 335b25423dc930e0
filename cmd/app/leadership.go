package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/uptrace/bun"

	"hearth/adapters/pubsub/projector"
	"hearth/adapters/readmodel"
	"hearth/domain/event"
	"hearth/internal/database"
	"hearth/leader"
)

// projectorAppName names the event-store sessions of a leadership term (its
// subscribers and poison publisher). The next leader ends any it finds
// (leader.Config.FenceAppName), so a frozen or cut-off leader's open
// subscriber transactions cannot hold the offsets, or pg_snapshot_xmin,
// for longer than it takes to notice.
const projectorAppName = "hearth-projector"

// newElector builds the leadership elector: the lock on the event store,
// the fencing terms in the read model.
func newElector(cfg Config, dbs databases, log *slog.Logger) (*leader.Elector, error) {
	return leader.New(leader.Config{
		ConnString:   cfg.DatabaseURL,
		TermDB:       dbs.rm.DB,
		FenceAppName: projectorAppName,
		Log:          log,
	})
}

// lead runs the projections for one leadership term until ctx ends: on an
// event-store pool of the term's own, with every projection transaction
// checking term, and stepping down (returning the error) as soon as one
// finds that term stale.
func lead(ctx context.Context, term int64, cfg Config, lease time.Duration, w wiring, log *slog.Logger) error {
	es, err := database.OpenSQL(ctx, cfg.DatabaseURL, 4+2*len(w.projections), projectorAppName)
	if err != nil {
		return fmt.Errorf("open projector pool: %w", err)
	}
	defer es.Close()
	ctx, stepDown := context.WithCancelCause(ctx)
	defer stepDown(nil)
	ctx = readmodel.WithFence(ctx, readmodel.Fence{Lock: leader.LockName, Term: term, Lease: lease})
	defer w.liveTerm.Store(0)
	err = runProjections(ctx, cfg, es, w, stepDownOnStaleTerm(w.projections, stepDown), log.With("term", term),
		func() { w.liveTerm.Store(term) })
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

// leadership reports this instance's role and the current term for GET
// /admin/leadership; nil in api mode, which takes no part in leadership.
func leadership(elector *leader.Elector) func(context.Context) (map[string]any, error) {
	if elector == nil {
		return nil
	}
	return func(ctx context.Context) (map[string]any, error) {
		st := elector.Status()
		out := map[string]any{
			"lock": leader.LockName, "holder": elector.Holder(),
			"role": st.Role, "term": st.Term, "since": st.Since.UTC().Format(time.RFC3339Nano),
		}
		cur, ok, err := elector.CurrentTerm(ctx)
		if err != nil {
			return nil, err
		}
		if ok {
			out["current"] = map[string]any{"term": cur.Term, "holder": cur.Holder, "since": cur.Since.UTC().Format(time.RFC3339Nano)}
		}
		return out, nil
	}
}
