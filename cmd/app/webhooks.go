package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"

	"hearth/adapters/pubsub/projector"
	"hearth/adapters/readmodel"
	"hearth/adapters/webhooks"
	"hearth/internal/advisory"
	"hearth/internal/database"
	"hearth/internal/keyring"
	"hearth/leader"
)

// webhooksAppName names the event-store sessions of a webhook leadership
// term (its subscribers and its dispatcher's transactions); the next
// webhook leader ends any it finds, as the projections' does with
// projectorAppName.
const webhooksAppName = "hearth-webhooks"

// webhookPoolSize is the connections of a webhook term's pool: a
// subscriber per topic, a rescan, and the dispatcher's workers, which take
// turns (one round is a short transaction).
const webhookPoolSize = 10

// webhookUnit is webhook delivery as a leadership unit: a lock of its own
// (advisory.Webhooks) and its term in projection_leader, shared out by the
// Scheduler with the projections' units, so that any worker may lead it.
func webhookUnit(cfg Config, w wiring, log *slog.Logger) leader.Unit {
	return leader.Unit{Name: advisory.Webhooks, FenceAppName: webhooksAppName,
		Lead: func(ctx context.Context, term int64) error {
			return leadWebhooks(ctx, term, cfg, leader.DefaultLease, w, log)
		}}
}

// leadWebhooks runs webhook delivery for one leadership term until ctx
// ends: the fan-out's projections through the projector (catch-up, then a
// router woken by NOTIFY) and the dispatcher, sharing a notifier, on an
// event-store pool of the term's own. Every transaction that records
// fan-out or delivery state checks the term (hearth_es_fence, after
// webhooks.BeginTerm copied it to the event store); the first that finds it
// stale ends the term.
func leadWebhooks(ctx context.Context, term int64, cfg Config, lease time.Duration, w wiring, log *slog.Logger) error {
	log = log.With("lock", advisory.Webhooks, "term", term)
	db, err := database.OpenWith(ctx, cfg.DatabaseURL, webhookPoolSize, database.Options{ApplicationName: webhooksAppName})
	if err != nil {
		return fmt.Errorf("open webhook pool: %w", err)
	}
	defer db.Close()
	fence := readmodel.Fence{Lock: advisory.Webhooks, Term: term, Lease: lease, Function: webhooks.FenceFunction}
	if err := webhooks.BeginTerm(ctx, db.DB, fence); err != nil {
		return err
	}
	ctx, stepDown := context.WithCancelCause(readmodel.WithFence(ctx, fence))
	defer stepDown(nil)
	// The process's notifier when it has one (modes api and all, run by
	// its owner), else one of the term's own.
	notifier, own := w.notifier, w.notifier == nil
	if own {
		if notifier, err = projector.NewNotifier(cfg.DatabaseURL, log); err != nil {
			return err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	d, err := webhooks.NewDispatcher(gctx, webhooks.DispatcherConfig{
		DB: db.DB, Sender: w.webhookSender, Secrets: sealer(cfg.MasterKeys), Schedule: cfg.webhookSchedule(), Keep: cfg.WebhookDeliveryKeep,
		Decoders: w.vault, Metrics: w.webhookMetrics, OnStale: stepDown, Log: log, Rand: w.webhookRand, Tracer: w.tracer,
	})
	if err != nil {
		return err
	}
	pr, err := projector.New(projector.Config{
		EventStore: db.DB, ConnString: cfg.DatabaseURL, SameDB: true, Fallback: cfg.PollInterval, Log: log,
		RetryInitial: w.retryInitial, Parking: w.parking, Metrics: w.telemetry.projections, Registry: w.telemetry.reg,
		Notifier: notifier, Projections: stepDownOnStaleTerm(w.fanout, stepDown), Tracer: w.tracer, Pages: w.pages,
	})
	if err != nil {
		return err
	}
	if own {
		g.Go(func() error { return notifier.Run(gctx) })
	}
	g.Go(func() error {
		return d.Run(func() <-chan struct{} { return notifier.Signal(webhooks.DeliveriesTable) })
	})
	g.Go(func() error { return pr.Run(webhooks.WithDispatcher(gctx, d)) })
	err = g.Wait()
	if cause := context.Cause(ctx); errors.Is(cause, readmodel.ErrStaleTerm) {
		return cause
	}
	return err
}

// sealer is the master keys as what seals webhook secrets. The operator's
// commands that wire Hearth but touch no secret (parked, verify, rebuild)
// run without master keys: their sealer then fails any use, naming the
// setting. (serve and dev refuse to start without them.)
func sealer(ring *keyring.Ring) webhooks.Sealer {
	if ring == nil {
		return noMasterKeys{}
	}
	return ring
}

type noMasterKeys struct{}

func (noMasterKeys) Seal([]byte, []byte) ([]byte, error) { return nil, Config{}.requireMasterKeys() }
func (noMasterKeys) Open([]byte, []byte) ([]byte, error) { return nil, Config{}.requireMasterKeys() }
func (noMasterKeys) Stale([]byte) bool                   { return false }
