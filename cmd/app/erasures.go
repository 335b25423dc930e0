package main

import (
	"context"
	"log/slog"
	"time"

	"hearth/adapters/vault"
	"hearth/app/ops"
	"hearth/internal/advisory"
	"hearth/leader"
)

// erasureUnit is the erasure worker as a leadership unit (advisory.Erasures):
// one instance at a time runs the second passes of erasures left pending,
// whichever instance (or CLI run) erased. It writes through the shared
// event-store pool, unfenced: a second pass is all or nothing, under the
// subject's lock, and one run twice (by a leader cut off meanwhile) finds
// nothing left and clears no record but its own.
func erasureUnit(w wiring, log *slog.Logger) leader.Unit {
	return leader.Unit{Name: advisory.Erasures,
		Lead: func(ctx context.Context, term int64) error {
			return leadErasures(ctx, w.erasures, vault.CacheFor, nil, log.With("lock", advisory.Erasures, "term", term))
		}}
}

// leadErasures runs the second passes due now, then again every interval,
// until ctx ends. round, when set, is told each round's outcome (tests).
func leadErasures(ctx context.Context, x *ops.Erasures, every time.Duration, round func(ran int, err error), log *slog.Logger) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		ran, err := x.RunDue(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			log.ErrorContext(ctx, "erasure second passes", "error", err, "ran", ran) // the next round retries
		} else if ran > 0 {
			log.InfoContext(ctx, "ran erasure second passes left pending", "ran", ran)
		}
		if round != nil {
			round(ran, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
