package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"hearth/adapters/pubsub"
	"hearth/adapters/readmodel"
	"hearth/adapters/vault"
	"hearth/adapters/webhooks"
	"hearth/app/command"
	"hearth/internal/advisory"
	"hearth/internal/database"
	"hearth/leader"
)

// plansAppName names the event-store sessions of a visit generator's term;
// the next leader ends any it finds.
const plansAppName = "hearth-plans"

// planUnit is the visit generator as a leadership unit: a lock of its own
// (advisory.Plans) and its term, copied to the event store, which every
// transaction of the generator checks with its commit (planFenced).
func planUnit(cfg Config, log *slog.Logger) leader.Unit {
	return leader.Unit{Name: advisory.Plans, FenceAppName: plansAppName,
		Lead: func(ctx context.Context, term int64) error {
			return leadPlans(ctx, term, cfg, leader.DefaultLease, nil, log)
		}}
}

// leadPlans runs the visit generator for one term until ctx ends: a run
// over every plan now, then every PlanInterval. between, when set, is the
// generator's hook between two visits (tests).
func leadPlans(ctx context.Context, term int64, cfg Config, lease time.Duration, between func(context.Context), log *slog.Logger) error {
	log = log.With("lock", advisory.Plans, "term", term)
	db, err := database.OpenWith(ctx, cfg.DatabaseURL, 2, database.Options{ApplicationName: plansAppName})
	if err != nil {
		return fmt.Errorf("open plans pool: %w", err)
	}
	defer db.Close()
	fence := readmodel.Fence{Lock: advisory.Plans, Term: term, Lease: lease, Function: webhooks.FenceFunction}
	if err := webhooks.BeginTerm(ctx, db.DB, fence); err != nil {
		return err
	}
	var vlt *vault.Vault // the orders' notes are sealed like any command's
	if cfg.MasterKeys != nil {
		if vlt, err = vault.New(db.DB, cfg.MasterKeys); err != nil {
			return err
		}
	}
	store, err := pubsub.NewStore(db, watermill.NewSlogLogger(log), vlt)
	if err != nil {
		return err
	}
	tx, err := pubsub.NewTransactor(store)
	if err != nil {
		return err
	}
	gen, err := command.NewVisitGenerator(tx)
	if err != nil {
		return err
	}
	gen.Between = between
	gen.MerchantShare, gen.Interval = cfg.PlanMerchantShare, cfg.PlanInterval
	gen.Fatal = func(err error) bool { return errors.Is(readmodel.StaleTerm(err), readmodel.ErrStaleTerm) }
	plans, err := pubsub.NewPlans(db.DB)
	if err != nil {
		return err
	}
	fenced := planFenced(ctx, fence)
	tick := time.NewTicker(cfg.PlanInterval)
	defer tick.Stop()
	for {
		done, err := gen.All(fenced, plans, time.Now(), cfg.PlanHorizon)
		if err = readmodel.StaleTerm(err); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, readmodel.ErrStaleTerm) {
				return err
			}
			log.ErrorContext(ctx, "generate visits", "error", err) // the next round retries
		} else if done != (command.VisitsDone{}) {
			log.InfoContext(ctx, "generated visits", "created", done.Created, "unassigned", done.Unassigned, "replanned", done.Replanned,
				"cancelled", done.Cancelled)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// planFenced returns ctx in which every transaction of the generator checks
// fence's term with its commit (pubsub.WithCommitCheck), after it has
// loaded what it appends to: checked right after BEGIN, the check's row
// lock would take the transaction's id before the loads, and an order
// changed in between would turn the visit's re-plan or cancellation into a
// conflict, left for a later round. The lease (the idle timeout that ends
// a frozen leader's transaction) is set right after BEGIN: it takes no id.
func planFenced(ctx context.Context, fence readmodel.Fence) context.Context {
	check, _ := readmodel.FenceSQL(readmodel.WithFence(ctx, fence))
	lease := fmt.Sprintf("SELECT set_config('idle_in_transaction_session_timeout', '%d', true)", fence.Lease.Milliseconds())
	return pubsub.WithCommitCheck(database.WithBegin(ctx, lease), check)
}
