package leader_test

import (
	"context"
	"log/slog"
	"os"
	"os/signal"

	"hearth/leader"
)

// Run the projections only while this instance holds the lock. The lead
// function must stop everything it started when its context is done: that
// is how a leader that lost its lock connection fences itself.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	e, err := leader.New(leader.Config{
		ConnString: os.Getenv("DATABASE_URL"), // direct, never through a transaction-mode pooler
		Log:        log,
	})
	if err != nil {
		log.Error("leader config", "err", err)
		return
	}
	err = e.Run(ctx, func(ctx context.Context) error {
		// Build a fresh Watermill router and subscribers for this term and
		// run them until ctx is done; context.Cause(ctx) says why it ended.
		<-ctx.Done()
		return nil
	})
	if err != nil {
		log.Error("leader", "err", err)
	}
}
