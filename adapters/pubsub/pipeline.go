package pubsub

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"
)

// PipelineConfig is what RunPipeline needs.
type PipelineConfig struct {
	// EventStore is the event-store database.
	EventStore *sql.DB
	// ConnString is the event store's URL, for the LISTEN connection.
	ConnString string
	// SameDB reports that the read model lives in the event store's
	// database (the catch-up then moves offsets in the read-model
	// transaction).
	SameDB bool
	// Fallback is how often an idle subscriber polls when no notification
	// comes. Defaults to 250ms.
	Fallback time.Duration
	// Log defaults to slog.Default().
	Log *slog.Logger
	// RetryInitial overrides the router's first retry interval (tests).
	// Defaults to RetryInitial.
	RetryInitial time.Duration
	// CatchUpPageSize defaults to CatchUpPageSize.
	CatchUpPageSize int
}

// RunPipeline runs the projections for one leadership term, until ctx
// ends: it catches every projection up on its backlog in pages (CatchUp,
// all projections at once), then runs a fresh router whose subscribers wake
// on NOTIFY (Notifier) and poll every Fallback otherwise.
func RunPipeline(ctx context.Context, cfg PipelineConfig, projections ...Projection) error {
	if cfg.EventStore == nil {
		return errors.New("pubsub.RunPipeline: EventStore is required")
	}
	log := cmp.Or(cfg.Log, slog.Default())
	notifier, err := NewNotifier(cfg.ConnString, log)
	if err != nil {
		return err
	}
	poison, err := SQLPublisher(cfg.EventStore, log)
	if err != nil {
		return err
	}
	defer poison.Close()

	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return notifier.Run(gctx) })
	fail := func(err error) error {
		cancel()
		return errors.Join(err, g.Wait())
	}

	catchUp := CatchUp{DB: cfg.EventStore, SameDB: cfg.SameDB, PageSize: cfg.CatchUpPageSize, Log: log}
	cg, cctx := errgroup.WithContext(gctx)
	for _, p := range projections {
		cg.Go(func() error {
			_, err := catchUp.Run(cctx, p)
			return err
		})
	}
	if err := cg.Wait(); err != nil {
		if gctx.Err() != nil {
			return fail(nil) // shutting down
		}
		return fail(err)
	}

	router, err := NewRouter(RouterConfig{
		Subscriber:   NotifyingSubscribers(cfg.EventStore, notifier, log, cmp.Or(cfg.Fallback, 250*time.Millisecond)),
		Poison:       poison,
		Log:          log,
		RetryInitial: cfg.RetryInitial,
	}, projections...)
	if err != nil {
		return fail(err)
	}
	g.Go(func() error {
		err := router.Run(gctx)
		if parent.Err() != nil {
			return nil // the term ended, possibly while the router was still subscribing
		}
		return err
	})
	return g.Wait()
}
