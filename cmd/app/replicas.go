package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"hearth/adapters/readmodel"
	"hearth/app/query"
	"hearth/domain/reference"
	"hearth/internal/database"
	"hearth/internal/refdata"
	"hearth/internal/replicas"
)

// ReadReplicas are the read replicas the API's GETs read from
// (docs/operations.md, "Read replicas").
type ReadReplicas struct {
	// URLs are streaming replicas of DATABASE_URL's server, on its database
	// (READ_REPLICA_URLS, comma-separated, one server each): the reference
	// data's GETs, and the read models' when they share DATABASE_URL.
	// Defaults to none: every read on the primary.
	URLs []string
	// ReadModelURLs are replicas of READMODEL_DATABASE_URL's server, on its
	// database (READMODEL_REPLICA_URLS). Defaults to URLs when the read
	// models share DATABASE_URL, else to none.
	ReadModelURLs []string
	// MaxLag: a replica further behind its primary is skipped until it
	// catches up (READ_REPLICA_MAX_LAG). Defaults to 5s.
	MaxLag time.Duration
	// CheckEvery is how often each replica's lag is measured
	// (READ_REPLICA_CHECK_INTERVAL). Defaults to 1s.
	CheckEvery time.Duration
}

// readReplicas reads the replica settings (cfg's database URLs are
// filled); duration reads a positive Go duration (loadConfig's).
func readReplicas(getenv func(string) string, duration func(string, time.Duration) time.Duration, cfg Config, errs *[]error) ReadReplicas {
	urls := func(name string) []string {
		var out []string
		for item := range strings.SplitSeq(getenv(name), ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			if c, err := pgx.ParseConfig(item); err != nil || !strings.Contains(item, "://") {
				msg := "must be postgres:// URLs, comma-separated, one server each"
				if err != nil {
					msg += ": " + redact(err, item) + pgVariablesSet(getenv)
				}
				*errs = append(*errs, fmt.Errorf("%s: replica %d: %s", name, len(out)+1, msg))
			} else if replicas.SeveralHosts(c) {
				*errs = append(*errs, fmt.Errorf("%s: replica %d names several hosts: a replica URL names one server", name, len(out)+1))
			} else if attrs := targetSessionAttrs(item); attrs == "read-write" || attrs == "primary" {
				*errs = append(*errs, fmt.Errorf("%s: replica %d asks for target_session_attrs=%s, which a standby never is", name, len(out)+1, attrs))
			}
			out = append(out, item)
		}
		return out
	}
	r := ReadReplicas{
		URLs: urls("READ_REPLICA_URLS"), ReadModelURLs: urls("READMODEL_REPLICA_URLS"),
		MaxLag: duration("READ_REPLICA_MAX_LAG", 5*time.Second), CheckEvery: duration("READ_REPLICA_CHECK_INTERVAL", time.Second),
	}
	if r.ReadModelURLs == nil && cfg.ReadModelDatabaseURL == cfg.DatabaseURL {
		r.ReadModelURLs = r.URLs
	}
	return r
}

// routeReads sends the API's GETs of read models and reference data to the
// read replicas (with a replica setting; nothing otherwise): it opens them,
// refusing a server of another cluster, and rebuilds those queries on
// routed read models. Commands, the answers of writes, the event feed,
// webhooks, exports, the console and the operator's tools read the
// primary. Call Run on w.reads to keep the lags measured.
func (w *wiring) routeReads(ctx context.Context, cfg Config, dbs databases, log *slog.Logger) error {
	rr := cfg.ReadReplicas
	if len(rr.URLs) == 0 && len(rr.ReadModelURLs) == 0 {
		return nil
	}
	m, err := replicas.NewMetrics(w.telemetry.reg)
	if err != nil {
		return err
	}
	apiES, apiRM := dbs.api()
	open := func(setting, primarySetting string, primary *bun.DB, urls []string) (*replicas.Set, error) {
		if len(urls) == 0 {
			return nil, nil
		}
		return replicas.Open(ctx, replicas.Config{
			Setting: setting, PrimarySetting: primarySetting, Primary: primary, URLs: urls,
			MaxLag: rr.MaxLag, CheckEvery: rr.CheckEvery, Metrics: m, Log: log,
			Options: database.Options{ApplicationName: requestPoolName, StatementTimeout: cfg.RequestStatementTimeout},
		})
	}
	es, err := open("READ_REPLICA_URLS", "DATABASE_URL", apiES, rr.URLs)
	if err != nil {
		return err
	}
	rm := es
	if cfg.ReadModelDatabaseURL != cfg.DatabaseURL || !sameURLs(rr.ReadModelURLs, rr.URLs) {
		if rm, err = open("READMODEL_REPLICA_URLS", "READMODEL_DATABASE_URL", apiRM, rr.ReadModelURLs); err != nil {
			if es != nil {
				es.Close()
			}
			return err
		}
	}
	primaryPositions, err := readmodel.NewPositions(apiES, apiRM)
	if err != nil {
		return err
	}
	router, err := replicas.NewRouter(es, rm, m, primaryPositions, func(db *bun.DB) (replicas.Waiter, error) {
		p, err := readmodel.NewPositions(apiES, db)
		if err != nil {
			return nil, err
		}
		if cfg.ReadModelDatabaseURL == cfg.DatabaseURL {
			// The replica of the read models is the event store's too, and
			// may answer the GET's reference data (the Router sends those
			// to the primary only when the two have Sets of their own): it
			// must show the write's commit, not only its read-model rows,
			// for a write with none (customer.erased, from the feed).
			p = p.OnEventStore()
		}
		return p, nil
	})
	if err != nil {
		return err
	}
	w.reads = router
	if err := w.routeQueries(es, rm, m, apiES, apiRM); err != nil {
		router.Close()
		w.reads = nil
		return err
	}
	return nil
}

// routeQueries rebuilds the routed queries of w.app on es's and rm's
// replicas (either may be nil: that database's reads stay on the primary).
func (w *wiring) routeQueries(es, rm *replicas.Set, m *replicas.Metrics, apiES, apiRM *bun.DB) error {
	namesOn, err := replicas.Each(es, m, apiES, func(db *bun.DB) (query.Names, error) { return refdata.New(db) })
	if err != nil {
		return err
	}
	ordersOn, err := replicas.Each(rm, m, apiRM, func(db *bun.DB) (query.OrderReadModel, error) { return readmodel.NewOrders(db) })
	if err != nil {
		return err
	}
	requestsOn, err := replicas.Each(rm, m, apiRM, func(db *bun.DB) (query.ReadModel[query.ServiceRequest, query.ServiceRequestFilter], error) {
		return readmodel.NewServiceRequests(db)
	})
	if err != nil {
		return err
	}
	schedulesOn, err := replicas.Each(rm, m, apiRM, func(db *bun.DB) (query.ReadModel[query.Schedule, query.ScheduleFilter], error) {
		return readmodel.NewSchedules(db)
	})
	if err != nil {
		return err
	}
	names := replicas.Names(namesOn)
	q := &w.app.Queries
	if q.Orders, err = query.NewOrders(replicas.Orders(ordersOn), names); err != nil {
		return err
	}
	if q.ServiceRequests, err = query.NewServiceRequests(replicas.ReadModel(requestsOn), names); err != nil {
		return err
	}
	if q.Schedules, err = query.NewSchedules(replicas.ReadModel(schedulesOn), names); err != nil {
		return err
	}
	if q.Customers, err = routedRecords(es, m, apiES, refdata.Customers); err != nil {
		return err
	}
	if q.Staff, err = routedRecords(es, m, apiES, refdata.Staff); err != nil {
		return err
	}
	q.CatalogItems, err = routedRecords(es, m, apiES, refdata.CatalogItems)
	return err
}

// routedRecords is one kind of reference record's queries on es's replicas.
func routedRecords[T any, P reference.Record[T]](es *replicas.Set, m *replicas.Metrics, apiES *bun.DB,
	table func(*bun.DB) refdata.Table[T, P]) (query.Records[T], error) {
	rt, err := replicas.Each(es, m, apiES, func(db *bun.DB) (query.RecordReader[T], error) { return table(db), nil })
	if err != nil {
		return query.Records[T]{}, err
	}
	return query.NewRecords(replicas.Records(rt))
}

// targetSessionAttrs is the URL's target_session_attrs parameter.
func targetSessionAttrs(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Query().Get("target_session_attrs")
}

func sameURLs(a, b []string) bool {
	return strings.Join(a, ",") == strings.Join(b, ",")
}
