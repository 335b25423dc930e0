package projector

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
)

// Config is what New needs.
type Config struct {
	// EventStore is the event-store database. Required.
	EventStore *sql.DB
	// ConnString is the event store's URL, for the LISTEN connection.
	ConnString string
	// Notifier, when set, is the process's notifier, run by its owner: the
	// projections share its LISTEN connection (with the event feed).
	// Otherwise each Run opens a notifier of its own on ConnString.
	Notifier *Notifier
	// SameDB reports that the read model lives in the event store's
	// database (the catch-up then moves offsets in the read-model
	// transaction).
	SameDB bool
	// Fallback is how often an idle subscriber polls when no notification
	// comes. Required: its one default is the configuration's
	// (cmd/app Config.PollInterval, POLL_INTERVAL).
	Fallback time.Duration
	// Log defaults to slog.Default().
	Log *slog.Logger
	// RetryInitial overrides the router's first retry interval (tests).
	// Defaults to RetryInitial.
	RetryInitial time.Duration
	// RetryClock is the time the retry budget runs on. Nil: real time.
	RetryClock Clock
	// CatchUpPageSize defaults to CatchUpPageSize.
	CatchUpPageSize int
	// Parking, Metrics and Registry go to the router (see RouterConfig).
	// A projection with parked aggregates skips the catch-up: the router,
	// which holds back a parked aggregate's events, takes its backlog.
	// Optional.
	Parking  *Parking
	Metrics  *Metrics
	Registry prometheus.Registerer
	// Tracer gives each apply of the router a span (see RouterConfig), and
	// each page of the catch-up (see CatchUp). Optional.
	Tracer trace.Tracer
	// Pages, when set, is the process's page cache, which the catch-ups
	// of its consumers share (see Pages).
	Pages *Pages
	// OnLive, when set, is called once the term's router runs: the
	// catch-up is done and the subscribers are subscribed.
	OnLive func()
	// Projections are the read models fed, each from its topic.
	Projections []Projection
}

// Projector feeds the projections from the event store: catch-up, then a
// router (retry, poison, parking, lookahead, metrics) whose subscribers wake
// on NOTIFY. It holds its collaborators; each Run is one leadership term.
type Projector struct {
	db           *sql.DB
	connString   string
	notifier     *Notifier
	sameDB       bool
	fallback     time.Duration
	log          *slog.Logger
	retryInitial time.Duration
	retryClock   Clock
	pageSize     int
	parking      *Parking
	skips        *Skips
	metrics      *Metrics
	registry     prometheus.Registerer
	tracer       trace.Tracer
	pages        *Pages
	onLive       func()
	projections  []Projection
}

// New returns the projector cfg describes.
func New(cfg Config) (*Projector, error) {
	if cfg.EventStore == nil {
		return nil, errors.New("projector.New: EventStore is required")
	}
	if cfg.Fallback <= 0 {
		return nil, errors.New("projector.New: Fallback is required")
	}
	onLive := cfg.OnLive
	if onLive == nil {
		onLive = func() {}
	}
	return &Projector{
		db: cfg.EventStore, connString: cfg.ConnString, notifier: cfg.Notifier, sameDB: cfg.SameDB, fallback: cfg.Fallback,
		log: cmp.Or(cfg.Log, slog.Default()), retryInitial: cfg.RetryInitial, retryClock: cfg.RetryClock,
		pageSize: cfg.CatchUpPageSize, parking: cfg.Parking, skips: NewSkips(cfg.EventStore), metrics: cfg.Metrics, registry: cfg.Registry,
		tracer: cfg.Tracer, pages: cfg.Pages, onLive: onLive, projections: cfg.Projections,
	}, nil
}

// Run runs the projections for one leadership term, until ctx ends: it
// catches every projection up on its backlog in pages (CatchUp, all
// projections at once), then runs a fresh router whose subscribers wake on
// NOTIFY (Notifier) and poll every Fallback otherwise.
func (pr *Projector) Run(ctx context.Context) error {
	log := pr.log
	notifier, own := pr.notifier, pr.notifier == nil
	if own {
		var err error
		if notifier, err = NewNotifier(pr.connString, log); err != nil {
			return err
		}
	}
	poison, err := SQLPublisher(pr.db, log)
	if err != nil {
		return err
	}
	defer poison.Close()

	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	if own {
		g.Go(func() error { return notifier.Run(gctx) })
	}
	fail := func(err error) error {
		cancel()
		return errors.Join(err, g.Wait())
	}

	catchUp := CatchUp{DB: pr.db, SameDB: pr.sameDB, PageSize: pr.pageSize, Log: log, Tracer: pr.tracer, Pages: pr.pages, Skips: pr.skips}
	cg, cctx := errgroup.WithContext(gctx)
	for _, p := range pr.projections {
		cg.Go(func() error {
			if pr.parking != nil {
				parked, err := pr.parking.List(cctx, p.Name)
				if err != nil {
					return err
				}
				if len(parked) > 0 {
					log.Info("catch-up skipped: the projection has parked aggregates", "projection", p.Name, "parked", len(parked))
					return nil
				}
			}
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

	ahead := NewLookahead()
	subscribers := NotifyingSubscribers(SubscribersConfig{DB: pr.db, Notifier: notifier, Fallback: pr.fallback, Lookahead: ahead, Log: log})
	router, err := pr.router(subscribers, poison, ahead)
	if err != nil {
		return fail(err)
	}
	g.Go(func() error { return runRouter(gctx, router, log, pr.onLive) })
	err = g.Wait()
	if parent.Err() != nil {
		return nil // the term ended: errors of parts cut short are not errors
	}
	return err
}

// runRouter runs router until ctx ends. The router runs on a context of its
// own, ended only once it is running: when a term ends while the router is
// still subscribing, watermill (v1.5.1) returns "cannot subscribe" and
// leaves a goroutine waiting for ever on handlers that never started.
func runRouter(ctx context.Context, router *message.Router, log *slog.Logger, onLive func()) error {
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	done := make(chan error, 1)
	go func() { done <- router.Run(runCtx) }()
	select {
	case <-router.Running():
		onLive()
	case err := <-done:
		return err
	}
	select {
	case <-ctx.Done():
		stop() // Run closes the router: in-flight messages are cancelled, subscribers closed
		if err := <-done; err != nil {
			log.Debug("router stopped", "error", err)
		}
		return nil
	case err := <-done:
		return err
	}
}
