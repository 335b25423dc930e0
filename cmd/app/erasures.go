package main

import (
	"context"
	"log/slog"
	"time"

	"hearth/app/ops"
)

// leadErasures runs the second passes due now, then every interval (a
// scaffold for the test; the worker comes with the fix).
func leadErasures(ctx context.Context, x *ops.Erasures, every time.Duration, round func(ran int, err error), log *slog.Logger) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		ran, err := x.RunDue(ctx)
		if ctx.Err() != nil {
			return nil
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
