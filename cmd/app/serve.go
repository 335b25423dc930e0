package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/projector"
	"hearth/adapters/readmodel"
	"hearth/adapters/vault"
	"hearth/adapters/webhooks"
	"hearth/app"
	"hearth/app/access"
	"hearth/app/command"
	"hearth/app/ops"
	"hearth/app/query"
	"hearth/internal/database"
	"hearth/internal/idempotency"
	"hearth/internal/refdata"
	"hearth/internal/replicas"
	"hearth/leader"
	"hearth/migrations"
	httpport "hearth/ports/http"
	"hearth/ports/http/console"
)

// databases are the pools; rm == es when one database holds both.
type databases struct {
	es, rm *bun.DB
	// apiES and apiRM serve the HTTP requests (openRequestPools): their
	// sessions carry statement_timeout (REQUEST_STATEMENT_TIMEOUT), so a slow
	// request query is cut, while the projections, catch-up, rebuild and
	// verify on es and rm run as long as they must. Nil (the operator's
	// commands, worker mode): es and rm serve requests too.
	apiES, apiRM *bun.DB
}

// requestPoolName names the request path's sessions
// (pg_stat_activity.application_name).
const requestPoolName = "hearth-api"

// openRequestPools opens the request path's pools, with statement_timeout.
func (d *databases) openRequestPools(ctx context.Context, cfg Config) error {
	opts := database.Options{ApplicationName: requestPoolName, StatementTimeout: cfg.RequestStatementTimeout}
	es, err := database.OpenWith(ctx, cfg.DatabaseURL, 20, opts)
	if err != nil {
		return fmt.Errorf("DATABASE_URL (request pool): %w", err)
	}
	rm := es
	if cfg.ReadModelDatabaseURL != cfg.DatabaseURL {
		if rm, err = database.OpenWith(ctx, cfg.ReadModelDatabaseURL, 20, opts); err != nil {
			_ = es.Close()
			return fmt.Errorf("READMODEL_DATABASE_URL (request pool): %w", err)
		}
	}
	d.apiES, d.apiRM = es, rm
	return nil
}

// api returns the pools that serve requests.
func (d databases) api() (es, rm *bun.DB) {
	return cmp.Or(d.apiES, d.es), cmp.Or(d.apiRM, d.rm)
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
	if d.apiES != nil {
		_ = d.apiES.Close()
		if d.apiRM != d.apiES {
			_ = d.apiRM.Close()
		}
	}
}

func (d databases) migrate(ctx context.Context, log *slog.Logger) error {
	if err := checkUTF8(ctx, d.es.DB, "DATABASE_URL"); err != nil {
		return err
	}
	if d.rm != d.es {
		if err := checkUTF8(ctx, d.rm.DB, "READMODEL_DATABASE_URL"); err != nil {
			return err
		}
	}
	if d.rm != d.es {
		if err := d.checkNotSwapped(ctx); err != nil {
			return err
		}
	}
	for _, step := range []struct {
		db  *bun.DB
		set migrations.Set
	}{{d.es, migrations.EventStore}, {d.rm, migrations.ReadModel}} {
		n, err := migrations.Apply(ctx, step.db.DB, step.set)
		if err != nil {
			return err
		}
		log.Info("migrations applied", "set", step.set, "new", n)
		unknown, err := migrations.Unknown(ctx, step.db.DB, step.set)
		if err != nil {
			return err
		}
		if len(unknown) > 0 {
			names := make([]string, len(unknown))
			for i, m := range unknown {
				names[i] = m.Name
			}
			log.Warn("the database holds migrations this binary does not know: it is older than the schema, which only the previous release's binary during a rolling upgrade may be (docs/operations.md, Upgrades)",
				"set", step.set, "versions", strings.Join(names, ","))
		}
	}
	if err := checkTransactionCounter(ctx, d.es); err != nil {
		return err
	}
	if d.rm != d.es {
		// First: a pair refused for that records no pairing either.
		if err := d.checkReadModelNotAhead(ctx); err != nil {
			return err
		}
	}
	return d.checkReadModelPaired(ctx)
}

// checkUTF8 refuses a database whose encoding is not UTF-8, before
// anything is migrated: Hearth stores text from anywhere, compares
// merchants' names under Unicode normalisation, and pgx speaks UTF-8 only,
// so such a database would fail later, one write or query at a time, with
// errors that name neither the encoding nor the remedy.
func checkUTF8(ctx context.Context, db *sql.DB, setting string) error {
	enc, err := database.ParameterStatus(ctx, db, "server_encoding")
	if err != nil {
		return fmt.Errorf("%s: read the database's encoding: %w", setting, err)
	}
	if enc != "UTF8" {
		return fmt.Errorf("%s: the database is in encoding %s; Hearth needs UTF8: create it with CREATE DATABASE ... ENCODING 'UTF8' "+
			"TEMPLATE template0 (and a UTF-8 locale), then move its data there (docs/operations.md)", setting, enc)
	}
	return nil
}

// checkReadModelPaired refuses a read model that is not the one the event
// store's instances use. Instances deployed from different manifests may
// disagree on READMODEL_DATABASE_URL, and nothing else would notice: the
// consumer offsets are the event store's, so a worker of another read model
// would apply its share of the events there, missing from the one the others
// read for good, and its fencing terms are that database's, so it would not
// fence the others' leaders. The read model gets an identity from the first
// instance that starts on it, and the event store records the first it is
// used with. Each is a statement of its own, so that instances starting at
// once read the row whichever of them made it.
func (d databases) checkReadModelPaired(ctx context.Context) error {
	if _, err := d.rm.DB.ExecContext(ctx, `INSERT INTO read_model_identity DEFAULT VALUES ON CONFLICT DO NOTHING`); err != nil {
		return fmt.Errorf("READMODEL_DATABASE_URL: give the read model its identity: %w", err)
	}
	var id string
	if err := d.rm.DB.QueryRowContext(ctx, `SELECT id::text FROM read_model_identity`).Scan(&id); err != nil {
		return fmt.Errorf("READMODEL_DATABASE_URL: read the read model's identity: %w", err)
	}
	if _, err := d.es.DB.ExecContext(ctx, `INSERT INTO read_model_pairing (read_model_id) VALUES ($1) ON CONFLICT DO NOTHING`, id); err != nil {
		return fmt.Errorf("DATABASE_URL: record the read model: %w", err)
	}
	var paired string
	var since time.Time
	if err := d.es.DB.QueryRowContext(ctx, `SELECT read_model_id::text, paired_at FROM read_model_pairing`).Scan(&paired, &since); err != nil {
		return fmt.Errorf("DATABASE_URL: read the read model it is used with: %w", err)
	}
	if paired != id {
		return fmt.Errorf("READMODEL_DATABASE_URL names read model %s, but this event store's instances have used read model %s since %s: "+
			"every instance must have the same READMODEL_DATABASE_URL (unset: DATABASE_URL's database), or its projections would apply events "+
			"into a database the others do not read. If this database is the read model now (moved without its table read_model_identity, "+
			"or restored from a backup taken before it had one), stop every instance and DELETE FROM read_model_pairing in the event store "+
			"(docs/operations.md#one-read-model-for-every-instance)", id, paired, since.UTC().Format(time.RFC3339))
	}
	return nil
}

// readModelCheckRows is how many of the read model's latest change-log rows
// checkReadModelNotAhead looks for in the event store: the events applied
// last are the ones an event store restored from an older backup lost.
const readModelCheckRows = 100

// checkReadModelNotAhead refuses a read model that has applied events the
// event store does not hold: an event store restored from a backup older
// than the read model (two databases restored apart). Its rows stand at
// versions the event store lost, and the projection's version guard would
// take each event written at those versions from now on for one already
// applied, and drop it without a word. Every change-log row names an event
// of the store (events are never deleted), so one that is missing is that
// case. The latest rows are read by the change log's primary key, and
// looked up by the events' unique event_id.
func (d databases) checkReadModelNotAhead(ctx context.Context) error {
	rows, err := d.rm.DB.QueryContext(ctx, `SELECT event_id::text FROM change_log ORDER BY id DESC LIMIT $1`, readModelCheckRows)
	if err != nil {
		return fmt.Errorf("READMODEL_DATABASE_URL: read the latest change log: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("READMODEL_DATABASE_URL: read the latest change log: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("READMODEL_DATABASE_URL: read the latest change log: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	var missing sql.NullString
	var count int
	if err := d.es.DB.QueryRowContext(ctx, `SELECT min(id), count(*) FROM unnest($1::text[]) AS id
		WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.event_id = id::uuid)`, ids).Scan(&missing, &count); err != nil {
		return fmt.Errorf("DATABASE_URL: look up the read model's latest events: %w", err)
	}
	if count > 0 {
		return fmt.Errorf("READMODEL_DATABASE_URL: the read model has applied %d of its latest %d events that the event store does not hold (event %s among them): "+
			"the event store was restored from a backup older than the read model, whose projections would drop the events written from now on "+
			"at the versions it lost. Restore the read model from a backup taken before the event store's and rewind the projections "+
			"(docs/operations.md#restoring-the-read-model-two-databases)", count, len(ids), missing.String)
	}
	return nil
}

// checkTransactionCounter refuses an event store whose events carry
// transaction ids this Postgres server has not reached: a logical backup
// restored into another server (pg_restore), whose counter started over.
// The consumers' offsets (the projections', the webhook fan-out's, the
// relay's) and the clients' feed cursors name the old ids, and
// watermill-sql's subscribers read only the messages after their offset in
// (transaction id, offset) order, so every event written now, with a
// smaller id, would be skipped without a word. The events' transaction_id
// is indexed (events_transaction), so this costs one index probe.
func checkTransactionCounter(ctx context.Context, db *bun.DB) error {
	var last, next sql.NullString
	var behind sql.NullBool
	err := db.DB.QueryRowContext(ctx, `SELECT max(transaction_id)::text, pg_snapshot_xmax(pg_current_snapshot())::text,
		max(transaction_id) >= pg_snapshot_xmax(pg_current_snapshot()) FROM events`).Scan(&last, &next, &behind)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: check the transaction counter: %w", err)
	}
	if behind.Bool {
		return fmt.Errorf("DATABASE_URL: the events carry transaction ids up to %s, but this Postgres server's transaction counter is at %s: "+
			"the database was restored from a logical backup into another server, whose counter started over, and the projections, webhooks, "+
			"the relay and the event feed would skip every event written now. Advance the counter past %s before Hearth starts "+
			"(docs/operations.md#restoring-into-another-server)", last.String, next.String, last.String)
	}
	return nil
}

// checkNotSwapped refuses two databases of which one records only the other
// one's set: with DATABASE_URL and READMODEL_DATABASE_URL swapped, each set
// would be applied where it does not belong (nothing stops it: the names
// differ) and the instance would serve from an empty event store. One
// database holding both sets (a layout moved to two) is not refused.
func (d databases) checkNotSwapped(ctx context.Context) error {
	if err := checkNotOther(ctx, d.es, "DATABASE_URL", migrations.EventStore, migrations.ReadModel); err != nil {
		return err
	}
	return checkNotOther(ctx, d.rm, "READMODEL_DATABASE_URL", migrations.ReadModel, migrations.EventStore)
}

// checkNotOther refuses a database that records other's migrations and none
// of wants': it is the other database. The event store's set is applied
// first wherever both go, so no database of either layout is in that state.
func checkNotOther(ctx context.Context, db *bun.DB, setting string, wants, other migrations.Set) error {
	sets, err := migrations.Sets(ctx, db.DB)
	if err != nil {
		return fmt.Errorf("%s: %w", setting, err)
	}
	if slices.Contains(sets, other) && !slices.Contains(sets, wants) {
		return fmt.Errorf("%s names a database that holds the %s migrations and none of the %s ones: "+
			"are DATABASE_URL and READMODEL_DATABASE_URL swapped? Nothing was migrated", setting, other, wants)
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
// with the operator's use cases (and the adapters under them: parking, the
// event log, the read models' maintenance) and metrics.
type wiring struct {
	app        app.Application
	operator   *ops.Operator
	keys       *access.Keys
	auditTrail *ops.AuditTrail
	// exports exports a customer's data (GET /v1/customers/{id}/export,
	// app customers export).
	exports *ops.Exports
	// staffExports exports a staff member's data (GET
	// /v1/staff/{id}/export, app staff export).
	staffExports *ops.StaffExports
	erasures     *ops.Erasures
	// erasureRecords exports the erasures on record and applies such a
	// list again after a restore (app erasures export|apply).
	erasureRecords *ops.ErasureRecords
	refdata        *refdata.Store
	projections    []projector.Projection
	parking        *projector.Parking
	eventLog       *pubsub.EventLog
	vault          *vault.Vault // seals and opens personal fields: every event reader decodes through it
	// maintenance runs the rebuilds the admin API starts in the
	// background: close it at shutdown.
	maintenance *readmodel.Maintenance
	telemetry   *telemetry
	// tracer makes the spans of requests, commands, applies, deliveries
	// and relay publishes; nil when tracing is off (Config.Tracing).
	tracer trace.Tracer
	// pages is the page cache the catch-ups of this process's projections
	// and fan-outs share (projector.Pages).
	pages       *projector.Pages
	idempotency *idempotency.Store
	// fanout are the webhook fan-out's projections (one per topic), run by
	// the webhook leader (leadWebhooks); webhookSender sends the deliveries.
	fanout        []projector.Projection
	webhookSender *webhooks.Sender
	// webhookStore keeps the endpoints, their secrets sealed.
	webhookStore   *webhooks.Store
	webhookMetrics *webhooks.Metrics
	// webhookRand draws the jitter of webhook retries; nil: random (tests
	// fix it).
	webhookRand func() float64
	// retryInitial shortens the projections' retry budget in tests.
	// Defaults to projector.RetryInitial.
	retryInitial time.Duration
	// live is, by unit name, the term each projection runs live under on
	// this instance (caught up, router running).
	live map[string]*projectionLive
	// holder names this instance in leadership (tests run several workers
	// in one process). Defaults to the leader package's HOSTNAME/PID.
	holder string
	// lags is the projections' recent lag, for the console's on-call view.
	lags *console.LagHistory
	// notifier and feedWatcher are set by wireEventFeed (modes api and
	// all) and run by runNotifications. The projections, webhook delivery
	// and the relay share the notifier when it is set; otherwise each of
	// their terms opens its own.
	notifier    *projector.Notifier
	feedWatcher *pubsub.FeedWatcher
	// notifierOnDemand: the feed's watcher runs the notifier (mode api).
	notifierOnDemand bool
	// reads routes the API's GETs to the read replicas (routeReads,
	// replicas.go); nil without a replica setting.
	reads *replicas.Router
}

// wireEventFeed adds the event feed (GET /v1/events) to w: its reads on
// the request pool, and the process's one LISTEN connection (the notifier)
// with the watcher that wakes the feed's long polls from it.
func (w *wiring) wireEventFeed(cfg Config, dbs databases, log *slog.Logger) error {
	apiES, _ := dbs.api()
	store, err := pubsub.NewFeed(apiES.DB, w.vault)
	if err != nil {
		return err
	}
	if w.notifier, err = projector.NewNotifier(cfg.DatabaseURL, log); err != nil {
		return err
	}
	watch := pubsub.FeedWatcherConfig{DB: dbs.es.DB, Changed: w.notifier.AnyChanged, Fallback: cfg.PollInterval, Log: log}
	if cfg.Mode == ModeAPI {
		// The feed is the only reader of notifications in mode api: its
		// watcher listens while long polls wait, so that an API instance
		// without them receives no notification per commit.
		watch.Listen, w.notifierOnDemand = w.notifier.Run, true
	}
	w.feedWatcher, err = pubsub.NewFeedWatcher(watch)
	if err != nil {
		return err
	}
	if w.app.Queries.Events, err = query.NewFeed(store, w.feedWatcher); err != nil {
		return err
	}
	return w.telemetry.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hearth_event_feed_waiting",
		Help: "Reads of the event feed (GET /v1/events) waiting for events (long polls) on this instance.",
	}, func() float64 { return float64(w.feedWatcher.Waiting()) }))
}

// runNotifications runs the notifier and the event feed's watcher until ctx
// ends (in mode api, the watcher runs the notifier while long polls wait).
func (w wiring) runNotifications(ctx context.Context) error {
	if w.notifier == nil {
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	if !w.notifierOnDemand {
		g.Go(func() error { return w.notifier.Run(gctx) })
	}
	g.Go(func() error { return w.feedWatcher.Run(gctx) })
	return g.Wait()
}

// wire builds the application on the request pools (dbs.api) and the
// projections and the operator's tools on the others.
func wire(cfg Config, dbs databases, log *slog.Logger) (wiring, error) {
	apiES, apiRM := dbs.api()
	var errs []error
	must := func(err error) { errs = append(errs, err) }
	if cfg.MasterKeys == nil { // every event reader and writer needs them
		return wiring{}, cfg.requireMasterKeys()
	}
	vlt, err := vault.New(apiES.DB, cfg.MasterKeys)
	must(err)
	eventLog, err := pubsub.NewEventLog(dbs.es)
	must(err)
	newStore := pubsub.NewStore
	if cfg.SealingOff { // the bench's baseline: new events in clear, sealed ones still open
		newStore = pubsub.NewClearStore
		log.Warn("PERSONAL_DATA_SEALING=off: new events keep their personal fields in clear, out of erasure's reach; for measuring the cost of sealing only")
	}
	store, err := newStore(apiES, watermill.NewSlogLogger(log.With("component", "publisher")), vlt)
	must(err)
	tracer := cfg.Tracing.tracer()
	if store != nil {
		store.SetTracer(tracer)
	}
	ref, err := refdata.New(apiES)
	must(err)
	if ref != nil {
		ref.Decoders = vlt // a customer's export opens what is sealed for them
	}
	tx, err := pubsub.NewTransactor(store)
	must(err)
	projectors, err := readmodel.NewProjectors(dbs.rm, readmodel.Refold{Log: eventLog, Decoders: vlt})
	must(err)
	ordersRead, err := readmodel.NewOrders(apiRM)
	must(err)
	requestsRead, err := readmodel.NewServiceRequests(apiRM)
	must(err)
	schedulesRead, err := readmodel.NewSchedules(apiRM)
	must(err)
	plansRead, err := readmodel.NewPlans(apiRM)
	must(err)
	hooks, err := webhooks.NewStore(apiES.DB, sealer(cfg.MasterKeys))
	must(err)
	sender, err := webhooks.NewSender(webhooks.SenderConfig{Timeout: cfg.WebhookTimeout, AllowPrivate: cfg.WebhookAllowPrivate})
	must(err)
	fanout, err := webhooks.NewFanout(dbs.es)
	must(err)
	if err := errors.Join(errs...); err != nil {
		return wiring{}, err
	}
	customers, staff, items := refdata.Customers(apiES), refdata.Staff(apiES), refdata.CatalogItems(apiES)

	var a app.Application
	a.Commands.Customers, err = command.NewRecords(customers)
	must(err)
	a.Commands.Staff, err = command.NewRecords(staff)
	must(err)
	a.Commands.Staff = a.Commands.Staff.Audited(command.StaffActivity)
	a.Commands.CatalogItems, err = command.NewRecords(items)
	must(err)
	a.Commands.Orders, err = command.NewOrderHandlers(tx)
	must(err)
	a.Commands.ServiceRequests, err = command.NewServiceRequestHandlers(tx)
	must(err)
	a.Commands.Schedules, err = command.NewScheduleHandlers(tx)
	must(err)
	a.Commands.Plans, err = command.NewPlanHandlers(tx)
	must(err)
	a.Commands.Calendar, err = command.NewCalendar(ref)
	must(err)
	a.Queries.Plans, err = query.NewPlans(plansRead, ref)
	must(err)
	a.Queries.Calendar, err = query.NewCalendar(ref)
	must(err)
	a.Queries.PlanVisits, err = query.NewPlanVisits(store)
	must(err)
	a.Queries.Customers, err = query.NewRecords(customers)
	must(err)
	a.Queries.Staff, err = query.NewRecords(staff)
	must(err)
	a.Queries.CatalogItems, err = query.NewRecords(items)
	must(err)
	a.Queries.Orders, err = query.NewOrders(ordersRead, ref)
	must(err)
	a.Queries.ServiceRequests, err = query.NewServiceRequests(requestsRead, ref)
	must(err)
	a.Queries.Schedules, err = query.NewSchedules(schedulesRead, ref)
	must(err)
	a.Commands.Webhooks, err = command.NewWebhooks(hooks, sender.CheckTarget)
	must(err)
	a.Queries.Webhooks, err = query.NewWebhooks(hooks)
	must(err)
	if err := errors.Join(errs...); err != nil {
		return wiring{}, err
	}
	w := wiring{app: a, refdata: ref, fanout: fanout.Projections(), webhookSender: sender, webhookStore: hooks,
		vault: vlt, eventLog: eventLog, tracer: tracer, pages: projector.NewPages()}
	for _, p := range projectors { // one per aggregate type (internal/aggregates)
		pr := projector.ProjectionOf(p.Aggregate(), p.Apply, p.ApplyBatch)
		pr.Decode = vlt.Decoder(p.Aggregate()) // the one decoder that opens sealed fields
		pr.Prefetch = vlt.Prefetch             // a catch-up page's keys in one query
		pr.ForgetParked = p.ForgetParked       // an erasure reaches a parked aggregate's row
		w.projections = append(w.projections, pr)
	}
	w.live = liveByUnit(w.projections)
	if w.parking, err = projector.NewParking(dbs.es, append(slices.Clone(w.projections), w.fanout...)...); err != nil {
		return wiring{}, err
	}
	w.parking.Audit = refdata.WriteAudit
	if w.maintenance, err = readmodel.NewMaintenance(w.eventLog, vlt, dbs.rm); err != nil {
		return wiring{}, err
	}
	w.operator, err = ops.NewOperator(ops.Config{Parking: w.parking, Rebuilds: w.maintenance, Verifier: w.maintenance,
		Audit: ref, Log: log})
	must(err)
	w.keys, err = access.NewKeys(ref)
	must(err)
	w.auditTrail, err = ops.NewAuditTrail(ref)
	must(err)
	exportRows, err := readmodel.NewCustomerRows(apiRM)
	must(err)
	w.exports, err = ops.NewExports(exportRows, ref, 0)
	must(err)
	staffRows, err := readmodel.NewStaffRows(apiRM)
	must(err)
	w.staffExports, err = ops.NewStaffExports(staffRows, ref, 0)
	must(err)
	w.erasures, err = ops.NewErasures(store, vault.CacheFor)
	must(err)
	w.erasureRecords, err = ops.NewErasureRecords(store, w.erasures)
	must(err)
	if err := errors.Join(errs...); err != nil {
		return wiring{}, err
	}
	if w.idempotency, err = idempotency.New(apiES.DB); err != nil {
		return wiring{}, err
	}
	if w.telemetry, err = newTelemetry(dbs, append(slices.Clone(w.projections), w.fanout...), log); err != nil {
		return wiring{}, err
	}
	if w.webhookMetrics, err = webhooks.NewMetrics(w.telemetry.reg); err != nil {
		return wiring{}, err
	}
	if err := w.telemetry.reg.Register(shared(webhooks.NewStatsCollector(dbs.es.DB, log))); err != nil {
		return wiring{}, err
	}
	if err := w.telemetry.reg.Register(shared(newErasureCollector(w.erasures, log))); err != nil {
		return wiring{}, err
	}
	if w.lags, err = newLagHistory(dbs, w); err != nil {
		return wiring{}, err
	}
	return w, nil
}

// serve runs Hearth in its mode until ctx is done, then shuts down
// gracefully: the HTTP server drains, the projections finish or abort the
// message in flight, and the leadership locks are released.
func serve(ctx context.Context, cfg Config, log *slog.Logger) (err error) {
	// Stopped (SIGTERM, Ctrl-C) before it was ready, as an orchestrator
	// stops an instance mid-start: a stop asked for, not a failure, as a
	// stop once ready is; the line says what it was doing.
	started := false
	defer func() {
		if !started && err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			log.Info("hearth stopped before it was ready", "while", err.Error())
			err = nil
		}
	}()
	cfg, stopTracing, err := startTracing(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stopTracing() // last: the spans of the shutdown are flushed too
	dbs, err := openDatabases(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { dbs.close() }() // the request pools too, once open
	if err := dbs.migrate(ctx, log); err != nil {
		return err
	}
	if cfg.Mode != ModeWorker {
		if err := dbs.openRequestPools(ctx, cfg); err != nil {
			return err
		}
	}
	w, err := wire(cfg, dbs, log)
	if err != nil {
		return err
	}
	// Secrets written before they were sealed (or by a Hearth without a
	// master key) are sealed now, so none stays in clear past an upgrade.
	if n, err := w.webhookStore.SealSecrets(ctx, false); err != nil {
		return fmt.Errorf("seal webhook secrets: %w", err)
	} else if n > 0 {
		log.Info("sealed webhook signing secrets kept in clear", "endpoints", n, "master_key", cfg.MasterKeys.ActiveID())
	}
	if cfg.Mode != ModeWorker {
		if err := w.wireEventFeed(cfg, dbs, log); err != nil {
			return err
		}
		if err := w.routeReads(ctx, cfg, dbs, log); err != nil {
			return err
		}
		if w.reads != nil {
			defer w.reads.Close()
		}
	}

	var extra []leader.Unit
	relayUnit, err := newRelay(cfg, dbs, w, log)
	if err != nil {
		return err
	}
	if relayUnit != nil {
		extra = append(extra, *relayUnit)
	}
	extra = append(extra, webhookUnit(cfg, w, log), planUnit(cfg, log), erasureUnit(w, log))
	var sched *leader.Scheduler
	if cfg.Mode != ModeAPI {
		if sched, err = newScheduler(cfg, dbs, w, log, extra...); err != nil {
			return err
		}
		if err := w.telemetry.leadership(sched, w.live); err != nil {
			return err
		}
	}
	defer w.maintenance.Close()
	hcfg, err := httpConfig(cfg, dbs, w, sched, log)
	if err != nil {
		return err
	}
	// Key uses are flushed every KeyLastUsedFlush, and once more after the
	// HTTP servers have drained (below), so that no request's use is lost.
	flushCtx, stopFlush := context.WithCancel(context.WithoutCancel(ctx))
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		w.refdata.RunUseFlusher(flushCtx, cfg.KeyLastUsedFlush, log)
	}()
	defer func() {
		stopFlush()
		<-flushed
	}()
	listeners := []struct{ setting, addr string }{{"HTTP_ADDR", cfg.HTTPAddr}}
	surfaces := []httpport.Surface{httpport.SurfaceAll}
	if cfg.AdminAddr != "" {
		listeners = append(listeners, struct{ setting, addr string }{"ADMIN_ADDR", cfg.AdminAddr})
		surfaces = []httpport.Surface{httpport.SurfacePublic, httpport.SurfaceAdmin}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.runNotifications(gctx) })
	if w.reads != nil {
		g.Go(func() error { w.reads.Run(gctx); return nil })
	}
	// Closed when shutdown begins: the event feed's long polls answer at
	// once, so that the servers drain without waiting for them.
	draining := make(chan struct{})
	hcfg.Draining = draining
	g.Go(func() error {
		<-gctx.Done()
		close(draining)
		return nil
	})
	addrs := make([]any, 0, 2*len(listeners))
	defer closeConsole(hcfg.Console)
	for i, l := range listeners {
		hcfg.Surface = surfaces[i]
		if len(surfaces) > 1 && cfg.Mode != ModeWorker {
			if hcfg.Console, err = consoleFor(surfaces[i], cfg, w, hcfg, log); err != nil {
				return err
			}
			defer closeConsole(hcfg.Console)
		}
		handler, err := httpport.NewHandler(hcfg)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			return fmt.Errorf("%s %s: %w", l.setting, l.addr, err)
		}
		addrs = append(addrs, strings.ToLower(l.setting), ln.Addr().String())
		srv := newHTTPServer(cfg, handler)
		g.Go(func() error {
			if err := serveOn(cfg, srv, ln, w.telemetry.connectionRefused(l.setting)); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("http server (%s): %w", l.setting, err)
			}
			return nil
		})
		g.Go(func() error {
			<-gctx.Done()
			shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(gctx), cfg.ShutdownTimeout)
			defer cancel()
			return srv.Shutdown(shutdownCtx)
		})
	}
	if cfg.Mode != ModeWorker {
		announceIdempotencyKeep(ctx, cfg, w, log)
		g.Go(func() error {
			w.lags.Run(gctx)
			return nil
		})
		g.Go(func() error {
			w.idempotency.PruneLoop(gctx, cfg.IdempotencyKeep, idempotencyPruneEvery, idempotencyPruneBatch, func(err error) {
				log.Warn("prune idempotency keys", "error", err)
			})
			return nil
		})
	}
	if cfg.Mode != ModeAPI && cfg.TopicRetention > 0 {
		retention, err := newRetention(cfg, dbs, w, log)
		if err != nil {
			return err
		}
		g.Go(func() error {
			retention.Run(gctx, topicPruneEvery)
			return nil
		})
	}
	started = true
	log.Info("hearth started", append([]any{"mode", cfg.Mode, "split_databases", dbs.rm != dbs.es}, addrs...)...)

	if sched != nil {
		g.Go(func() error { return sched.Run(gctx) })
	}
	err = g.Wait()
	log.Info("hearth stopped")
	return err
}

// httpConfig is the HTTP API's configuration on the wiring: serve's, and
// the tests' (cmd/app/api_test.go), so that they cannot drift apart.
// sched is nil in API mode (and in tests without leadership).
func httpConfig(cfg Config, dbs databases, w wiring, sched *leader.Scheduler, log *slog.Logger) (httpport.Config, error) {
	positions, err := readmodel.NewPositions(dbs.api())
	if err != nil {
		return httpport.Config{}, err
	}
	hc := httpport.Config{
		App: w.app, Auth: w.refdata, Log: log, APIEnabled: cfg.Mode != ModeWorker,
		Ready: readiness(cfg, dbs, sched, w.live), Leadership: leadership(sched),
		Parked: w.operator, Rebuilds: w.operator,
		Metrics: w.telemetry.handler(), ObserveRequest: w.telemetry.observeRequest, Tracer: w.tracer,
		Consistency: positions, ConsistencyTimeout: cfg.ConsistencyTimeout, ConsistencyMaxWaits: cfg.ConsistencyMaxWaits,
		FeedWait: cfg.EventFeedWait, FeedMaxWaits: cfg.EventFeedMaxWaits,
		Idempotency: w.idempotency,
		KeyUsed:     w.refdata.NoteUse, Keys: w.keys, Audit: w.auditTrail, Exports: w.exports, StaffExports: w.staffExports,
		ExportMaxInFlight: cfg.ExportMaxInFlight,
		Erasures:          w.erasures,
		Limits:            cfg.httpLimits(), TrustedProxies: cfg.TrustedProxies, KeyCacheTTL: cfg.KeyCacheTTL,
	}
	if w.reads != nil {
		hc.Reads, hc.Consistency = w.reads, w.reads
	}
	if hc.APIEnabled {
		// The web console, at /console/ (ports/http/console).
		if hc.Console, err = consoleFor(httpport.SurfaceAll, cfg, w, hc, log); err != nil {
			return httpport.Config{}, err
		}
	}
	return hc, nil
}

// announceIdempotencyKeep records this instance's IDEMPOTENCY_KEEP before
// it answers a write, so that an instance that keeps keys for less, started
// after this one stopped, still prunes by it, and says when the instances
// disagree: records are then kept for the longest. A failure is logged; the
// pruning rounds announce it again before they prune.
func announceIdempotencyKeep(ctx context.Context, cfg Config, w wiring, log *slog.Logger) {
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	keeps, err := w.idempotency.Announce(callCtx, cfg.IdempotencyKeep)
	if err != nil {
		log.Warn("announce IDEMPOTENCY_KEEP", "error", err)
		return
	}
	if len(keeps) > 1 {
		log.Warn("API instances disagree on IDEMPOTENCY_KEEP: idempotency keys are kept for the longest",
			"idempotency_keep", cfg.IdempotencyKeep, "in_force", fmt.Sprint(keeps), "kept_for", keeps[len(keeps)-1])
	}
}

// Idempotency keys older than IdempotencyKeep are deleted this often, in
// batches of this many rows, so that no statement holds many locks.
const (
	idempotencyPruneEvery = 10 * time.Minute
	idempotencyPruneBatch = 1000
)

// The worker prunes the topic tables (TOPIC_RETENTION) this often, in
// statements of at most this many rows, so that no statement holds many
// row locks or runs long beside the subscribers.
const (
	topicPruneEvery = time.Minute
	topicPruneBatch = 1000
)

// newRetention prunes each aggregate type's topic: a message goes once
// every consumer group in the topic's offsets table has acknowledged it
// and TOPIC_RETENTION has passed. The groups are the database's, whatever
// this worker's settings (the relay's is there once a relay has started
// anywhere); the projections' and the fan-out's, which every process runs,
// hold the topic until they have a row.
func newRetention(cfg Config, dbs databases, w wiring, log *slog.Logger) (*pubsub.Retention, error) {
	var topics []pubsub.RetainedTopic
	index := map[string]int{}
	for _, p := range append(slices.Clone(w.projections), w.fanout...) {
		i, ok := index[p.Topic]
		if !ok {
			i = len(topics)
			index[p.Topic] = i
			topics = append(topics, pubsub.RetainedTopic{Topic: p.Topic})
		}
		topics[i].Groups = append(topics[i].Groups, p.Name)
	}
	return pubsub.NewRetention(pubsub.RetentionConfig{
		DB: dbs.es.DB, Topics: topics, Keep: cfg.TopicRetention, Batch: topicPruneBatch,
		Log: log, Registry: w.telemetry.reg,
	})
}

// maxHeaderBytes caps a request's headers (the request line too): Hearth's
// requests need a few hundred bytes.
const maxHeaderBytes = 64 << 10

// newHTTPServer is the HTTP server of one listener, with its timeouts: the
// headers must arrive within 5s (at most HTTP_READ_TIMEOUT), the whole
// request within HTTP_READ_TIMEOUT, the answer be written within
// HTTP_WRITE_TIMEOUT, and an idle keep-alive connection is closed after
// HTTP_IDLE_TIMEOUT. A request's context ends with HTTP_WRITE_TIMEOUT too
// (no answer can be written after it), so every database call a request
// makes has a deadline, even on a connection whose server went silent
// (a frozen primary: no TCP timeout fires while its kernel answers).
func newHTTPServer(cfg Config, handler http.Handler) *http.Server {
	return &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), cfg.HTTPWriteTimeout)
			defer cancel()
			handler.ServeHTTP(w, r.WithContext(ctx))
		}),
		ReadHeaderTimeout: min(5*time.Second, cfg.HTTPReadTimeout),
		ReadTimeout:       cfg.HTTPReadTimeout,
		WriteTimeout:      cfg.HTTPWriteTimeout,
		IdleTimeout:       cfg.HTTPIdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

// serveOn serves srv on ln, whose connections answer net/http's own errors
// (headers over maxHeaderBytes, an unreadable request) as problems
// (httpport.Listener), at most HTTP_MAX_CONNECTIONS_PER_ADDRESS of them
// open at once per client address (httpport.LimitConnectionsPerAddress),
// each connection refused so told to refused (nil for none).
func serveOn(cfg Config, srv *http.Server, ln net.Listener, refused func(answered bool)) error {
	ln = httpport.LimitConnectionsPerAddress(ln, cfg.HTTPMaxConnectionsPerAddress, cfg.TrustedProxies, refused)
	return srv.Serve(httpport.Listener(ln, maxHeaderBytes))
}

// runProjections runs the projection pipeline on the event store es for one
// leadership term (catch-up, then a fresh router woken by NOTIFY) until ctx
// ends.
func runProjections(ctx context.Context, cfg Config, es *sql.DB, w wiring, projections []projector.Projection, log *slog.Logger, onLive func()) error {
	pr, err := projector.New(projector.Config{
		EventStore:   es,
		ConnString:   cfg.DatabaseURL,
		Notifier:     w.notifier,
		SameDB:       cfg.ReadModelDatabaseURL == cfg.DatabaseURL,
		Fallback:     cfg.PollInterval,
		Log:          log,
		RetryInitial: w.retryInitial,
		Parking:      w.parking,
		Metrics:      w.telemetry.projections,
		Registry:     w.telemetry.reg,
		Tracer:       w.tracer,
		Pages:        w.pages,
		OnLive:       onLive,
		Projections:  projections,
	})
	if err != nil {
		return err
	}
	return pr.Run(ctx)
}
