package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/uptrace/bun"
	"golang.org/x/sync/errgroup"

	"hearth/adapters/pubsub"
	"hearth/adapters/readmodel"
	"hearth/adapters/refdata"
	"hearth/app"
	"hearth/app/command"
	"hearth/app/order"
	"hearth/app/query"
	"hearth/app/schedule"
	"hearth/app/servicerequest"
	"hearth/internal/database"
	"hearth/leader"
	"hearth/migrations"
	httpport "hearth/ports/http"
)

// databases are the two pools; rm == es when one database holds both.
type databases struct {
	es, rm *bun.DB
}

func openDatabases(ctx context.Context, cfg Config) (databases, error) {
	es, err := database.Open(ctx, cfg.DatabaseURL, 20)
	if err != nil {
		return databases{}, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if cfg.ReadModelDatabaseURL == cfg.DatabaseURL {
		return databases{es: es, rm: es}, nil
	}
	rm, err := database.Open(ctx, cfg.ReadModelDatabaseURL, 20)
	if err != nil {
		_ = es.Close()
		return databases{}, fmt.Errorf("READMODEL_DATABASE_URL: %w", err)
	}
	return databases{es: es, rm: rm}, nil
}

func (d databases) close() {
	_ = d.es.Close()
	if d.rm != d.es {
		_ = d.rm.Close()
	}
}

func (d databases) migrate(ctx context.Context, log *slog.Logger) error {
	for _, step := range []struct {
		db  *bun.DB
		set migrations.Set
	}{{d.es, migrations.EventStore}, {d.rm, migrations.ReadModel}} {
		n, err := migrations.Apply(ctx, step.db.DB, step.set)
		if err != nil {
			return err
		}
		log.Info("migrations applied", "set", step.set, "new", n)
	}
	return nil
}

func migrate(ctx context.Context, cfg Config, log *slog.Logger) error {
	dbs, err := openDatabases(ctx, cfg)
	if err != nil {
		return err
	}
	defer dbs.close()
	return dbs.migrate(ctx, log)
}

// wiring is the application and the projections built on the databases,
// with the operator's tools (parking, event log, rebuilds) and metrics.
type wiring struct {
	app         app.Application
	refdata     *refdata.Store
	projections []pubsub.Projection
	parking     *pubsub.Parking
	eventLog    *pubsub.EventLog
	telemetry   *telemetry
	// retryInitial shortens the projections' retry budget in tests.
	// Defaults to pubsub.RetryInitial.
	retryInitial time.Duration
	// liveTerm is the term whose projections run live (caught up, router
	// running); 0 when none.
	liveTerm *atomic.Int64
}

func wire(dbs databases, log *slog.Logger) (wiring, error) {
	store, err := pubsub.NewStore(dbs.es, watermill.NewSlogLogger(log.With("component", "publisher")))
	if err != nil {
		return wiring{}, err
	}
	ref, err := refdata.New(dbs.es)
	if err != nil {
		return wiring{}, err
	}
	tx, err := pubsub.NewTransactor(store)
	if err != nil {
		return wiring{}, err
	}
	orders, err := readmodel.NewOrders(dbs.rm)
	if err != nil {
		return wiring{}, err
	}
	requests, err := readmodel.NewServiceRequests(dbs.rm)
	if err != nil {
		return wiring{}, err
	}
	schedules, err := readmodel.NewSchedules(dbs.rm)
	if err != nil {
		return wiring{}, err
	}
	customers, staff, items := refdata.Customers(dbs.es), refdata.Staff(dbs.es), refdata.CatalogItems(dbs.es)

	var a app.Application
	var errs []error
	must := func(err error) { errs = append(errs, err) }
	a.Commands.Customers, err = command.NewRecords(customers)
	must(err)
	a.Commands.Staff, err = command.NewRecords(staff)
	must(err)
	a.Commands.CatalogItems, err = command.NewRecords(items)
	must(err)
	a.Commands.Orders, err = command.NewOrderHandlers(tx)
	must(err)
	a.Commands.ServiceRequests, err = command.NewServiceRequestHandlers(tx)
	must(err)
	a.Commands.Schedules, err = command.NewScheduleHandlers(tx)
	must(err)
	a.Queries.Customers, err = query.NewRecords(customers)
	must(err)
	a.Queries.Staff, err = query.NewRecords(staff)
	must(err)
	a.Queries.CatalogItems, err = query.NewRecords(items)
	must(err)
	a.Queries.Orders, err = query.NewOrders(orders, ref)
	must(err)
	a.Queries.ServiceRequests, err = query.NewServiceRequests(requests, ref)
	must(err)
	a.Queries.Schedules, err = query.NewSchedules(schedules, ref)
	must(err)
	if err := errors.Join(errs...); err != nil {
		return wiring{}, err
	}
	w := wiring{app: a, refdata: ref, liveTerm: new(atomic.Int64), projections: []pubsub.Projection{
		{Name: orders.Name(), Topic: pubsub.TopicOrders, Decode: order.Decode, Apply: orders.Apply, ApplyBatch: orders.ApplyBatch},
		{Name: requests.Name(), Topic: pubsub.TopicServiceRequests, Decode: servicerequest.Decode, Apply: requests.Apply, ApplyBatch: requests.ApplyBatch},
		{Name: schedules.Name(), Topic: pubsub.TopicSchedules, Decode: schedule.Decode, Apply: schedules.Apply, ApplyBatch: schedules.ApplyBatch},
	}}
	if w.parking, err = pubsub.NewParking(dbs.es, w.projections...); err != nil {
		return wiring{}, err
	}
	if w.eventLog, err = pubsub.NewEventLog(dbs.es); err != nil {
		return wiring{}, err
	}
	if w.telemetry, err = newTelemetry(dbs, w.projections, log); err != nil {
		return wiring{}, err
	}
	return w, nil
}

// serve runs Hearth in its mode until ctx is done, then shuts down
// gracefully: the HTTP server drains, the projections finish or abort the
// message in flight, and the leadership lock is released.
func serve(ctx context.Context, cfg Config, log *slog.Logger) error {
	dbs, err := openDatabases(ctx, cfg)
	if err != nil {
		return err
	}
	defer dbs.close()
	if err := dbs.migrate(ctx, log); err != nil {
		return err
	}
	w, err := wire(dbs, log)
	if err != nil {
		return err
	}

	var elector *leader.Elector
	if cfg.Mode != ModeAPI {
		elector, err = newElector(cfg, dbs, log)
		if err != nil {
			return err
		}
	}
	if elector != nil {
		if err := w.telemetry.leader(elector); err != nil {
			return err
		}
	}
	positions, err := readmodel.NewPositions(dbs.es, dbs.rm)
	if err != nil {
		return err
	}
	rebuilds, err := readmodel.NewRebuilds(w.eventLog, dbs.rm)
	if err != nil {
		return err
	}
	defer rebuilds.Close()
	handler, err := httpport.NewHandler(httpport.Config{
		App: w.app, Auth: w.refdata, Log: log, APIEnabled: cfg.Mode != ModeWorker,
		Ready: readiness(cfg, dbs, elector, w.liveTerm), Leadership: leadership(dbs, elector),
		Parked: w.parking, Rebuilds: rebuilds,
		Metrics: w.telemetry.handler(), ObserveRequest: w.telemetry.observeRequest,
		Consistency: positions, ConsistencyTimeout: cfg.ConsistencyTimeout,
		Limits: cfg.httpLimits(), TrustedProxies: cfg.TrustedProxies, KeyCacheTTL: cfg.KeyCacheTTL,
	})
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: cfg.HTTPAddr, Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
	}
	log.Info("hearth started", "mode", cfg.Mode, "http_addr", ln.Addr().String(), "split_databases", dbs.rm != dbs.es)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(gctx), cfg.ShutdownTimeout)
		defer cancel()
		return srv.Shutdown(shutdownCtx)
	})
	if elector != nil {
		g.Go(func() error {
			return elector.Run(gctx, func(leadCtx context.Context, term int64) error {
				return lead(leadCtx, term, cfg, elector.Lease(), w, log)
			})
		})
	}
	err = g.Wait()
	log.Info("hearth stopped")
	return err
}

// runProjections runs the projection pipeline on the event store es for one
// leadership term (catch-up, then a fresh router woken by NOTIFY) until ctx
// ends.
func runProjections(ctx context.Context, cfg Config, es *sql.DB, w wiring, projections []pubsub.Projection, log *slog.Logger, onLive func()) error {
	return pubsub.RunPipeline(ctx, pubsub.PipelineConfig{
		EventStore:   es,
		ConnString:   cfg.DatabaseURL,
		SameDB:       cfg.ReadModelDatabaseURL == cfg.DatabaseURL,
		Fallback:     cfg.PollInterval,
		Log:          log,
		RetryInitial: w.retryInitial,
		Parking:      w.parking,
		Metrics:      w.telemetry.projections,
		Registry:     w.telemetry.reg,
		OnLive:       onLive,
	}, projections...)
}

func readiness(cfg Config, dbs databases, elector *leader.Elector, liveTerm *atomic.Int64) func(context.Context) (map[string]any, error) {
	return func(ctx context.Context) (map[string]any, error) {
		details := map[string]any{"mode": cfg.Mode}
		if elector != nil {
			st := elector.Status()
			details["role"] = st.Role
			details["term"] = st.Term
			details["since"] = st.Since.UTC().Format(time.RFC3339Nano)
			if st.Role == leader.RoleLeader {
				details["projections"] = "catching_up"
				if liveTerm.Load() == st.Term {
					details["projections"] = "live"
				}
			}
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
