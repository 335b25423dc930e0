package leader_test

import (
	"context"
	"database/sql"
	"log/slog"
	"os"
	"os/signal"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	"hearth/leader"
)

// Run the projections only while this instance holds the lock. The lead
// function must stop everything it started when its context is done: that
// is how a leader that lost its lock connection fences itself. Every write
// it makes must check, inside its own transaction, that term is still the
// current one.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	readModel, err := sql.Open("pgx", os.Getenv("READMODEL_DATABASE_URL"))
	if err != nil {
		log.Error("read model", "err", err)
		return
	}
	defer readModel.Close()
	e, err := leader.New(leader.Config{
		ConnString: os.Getenv("DATABASE_URL"), // direct, never through a transaction-mode pooler
		TermDB:     readModel,                 // holds projection_leader
		Log:        log,
	})
	if err != nil {
		log.Error("leader config", "err", err)
		return
	}
	err = e.Run(ctx, func(ctx context.Context, term int64) error {
		// Build a fresh Watermill router and subscribers for this term and
		// run them until ctx is done; context.Cause(ctx) says why it ended.
		<-ctx.Done()
		return nil
	})
	if err != nil {
		log.Error("leader", "err", err)
	}
}
