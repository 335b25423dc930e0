package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"hearth/adapters/pubsub/projector"
	"hearth/adapters/readmodel"
	"hearth/app/access"
	httpport "hearth/ports/http"
	"hearth/ports/http/console"
)

// The on-call view charts each projection's lag over lagSpan, sampled
// every lagEvery.
const (
	lagEvery = 5 * time.Second
	lagSpan  = 10 * time.Minute
)

// newLagHistory is the lag history of the on-call view, read from the
// event store like the hearth_projection_lag_* metrics.
func newLagHistory(dbs databases, w wiring) (*console.LagHistory, error) {
	return console.NewLagHistory(func(ctx context.Context) ([]console.LagSample, error) {
		lags, err := projector.Lags(ctx, dbs.es.DB, w.projections...)
		out := make([]console.LagSample, len(lags))
		for i, l := range lags {
			out[i] = console.LagSample{Projection: l.Projection, Events: l.Events, Seconds: l.Seconds}
		}
		return out, err
	}, lagEvery, lagSpan)
}

// consoleFor builds the web console of a listener of the surface: on the
// public listener of a split (ADMIN_ADDR), operator and worker keys only,
// the on-call view being on the admin listener with a cookie of its own.
func consoleFor(surface httpport.Surface, cfg Config, w wiring, hcfg httpport.Config, log *slog.Logger) (http.Handler, error) {
	ccfg := console.Config{
		App: w.app, Sessions: w.refdata, KeyUsed: hcfg.KeyUsed,
		Consistency: hcfg.Consistency, ConsistencyTimeout: cfg.ConsistencyTimeout,
		Leadership: hcfg.Leadership, Parked: hcfg.Parked, Rebuilds: hcfg.Rebuilds, Verifier: w.operator,
		Projections: readmodel.Projections(), Lags: w.lags, Log: log,
	}
	if w.idempotency != nil {
		// The records of the API's Idempotency-Keys, pruned with them
		// (IDEMPOTENCY_KEEP): the forms write once by them too.
		ccfg.Idempotency = w.idempotency
	}
	switch surface {
	case httpport.SurfacePublic:
		ccfg.Roles = []access.Role{access.Operator, access.Worker}
	case httpport.SurfaceAdmin:
		ccfg.Roles, ccfg.CookieName = []access.Role{access.Admin}, "hearth_console_admin"
	}
	return console.New(ccfg)
}

// closeConsole stops what a console runs in the background.
func closeConsole(h http.Handler) {
	if c, ok := h.(*console.Console); ok {
		c.Close()
	}
}
