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
	ctx, log, readModel, done := exampleSetup()
	defer done()
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

// Share units of leader-only work among the workers: run the same
// Scheduler, with the same units, on every worker. Each unit has its own
// lock and term; each worker leads about its share of them. Adding work is
// one more Unit.
func ExampleScheduler() {
	ctx, log, readModel, done := exampleSetup()
	defer done()
	run := func(what string) func(ctx context.Context, term int64) error {
		return func(ctx context.Context, term int64) error {
			log.Info("leading", "unit", what, "term", term) // every write checks term
			<-ctx.Done()
			return nil
		}
	}
	s, err := leader.NewScheduler(leader.SchedulerConfig{
		Config: leader.Config{ConnString: os.Getenv("DATABASE_URL"), TermDB: readModel, Log: log},
		Units: []leader.Unit{
			{Name: "hearth/projections/orders", Lead: run("orders")},
			{Name: "hearth/webhooks", Lead: run("webhooks")},
		},
	})
	if err != nil {
		log.Error("leader config", "err", err)
		return
	}
	if err := s.Run(ctx); err != nil {
		log.Error("leader", "err", err)
	}
}

// exampleSetup is what both examples start from: a context ended by
// Ctrl-C, a logger, and the read-model database, which holds the terms.
func exampleSetup() (context.Context, *slog.Logger, *sql.DB, func()) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	readModel, err := sql.Open("pgx", os.Getenv("READMODEL_DATABASE_URL"))
	if err != nil {
		log.Error("read model", "err", err)
		stop()
		os.Exit(1)
	}
	return ctx, log, readModel, func() { readModel.Close(); stop() }
}
