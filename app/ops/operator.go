package ops

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/text"
	"hearth/domain/uuid"
)

// Parking holds back the events of aggregates whose events poisoned a
// projection (projector.Parking).
type Parking interface {
	// Projections names the projections that park, sorted.
	Projections() []string
	// List returns the parked aggregates of projection ("" for every
	// projection), oldest first.
	List(ctx context.Context, projection string) ([]ParkedAggregate, error)
	// Get returns one parked aggregate with its waiting events, or
	// apperr.ErrNotFound.
	Get(ctx context.Context, projection, streamID string) (ParkedAggregate, error)
	// Parked reports whether the merchant's aggregate is parked.
	Parked(ctx context.Context, projection, merchantID, streamID string) (ParkedAggregate, bool, error)
	// Replay applies the waiting events of one parked aggregate in version
	// order and, in the same transaction, records the entry audit returns
	// for the outcome. An aggregate not parked is apperr.ErrNotFound.
	Replay(ctx context.Context, projection, streamID string, audit func(ReplayResult) AuditEntry) (ReplayResult, error)
	// Skip skips the first waiting event and, in the same transaction,
	// records the entry audit returns for the outcome.
	Skip(ctx context.Context, s Skip, audit func(SkipResult) AuditEntry) (SkipResult, error)
}

// Rebuilds rebuilds a projection's table from the event log without
// downtime (readmodel.Maintenance).
type Rebuilds interface {
	// Start starts a rebuild in the background and returns its first
	// progress; one already running is an *apperr.ConflictError.
	Start(projection string) (RebuildProgress, error)
	// Status returns the progress of the projection's latest rebuild,
	// whichever process ran it (one that died midway reads as failed), or
	// apperr.ErrNotFound.
	Status(projection string) (RebuildProgress, error)
	// Cancel cancels the running rebuild, whichever process runs it (one
	// of another asked through the read models), waits for it to clean up
	// and returns its last progress.
	Cancel(ctx context.Context, projection string) (RebuildProgress, error)
	// Run rebuilds in the foreground until it is done or ctx ends;
	// progress, when set, is called as it goes.
	Run(ctx context.Context, projection string, progress func(RebuildProgress)) (RebuildProgress, error)
	// Running reports whether a rebuild of the projection runs now, in
	// this process or another (one that holds its lock).
	Running(ctx context.Context, projection string) (bool, error)
}

// Verifier compares the read models with the fold of their events
// (readmodel.Maintenance).
type Verifier interface {
	Verify(ctx context.Context, v Verification) (VerifyReport, error)
}

// AuditLog is the log of admin actions (refdata.Store).
type AuditLog interface {
	// RecordAudit records an action that is no transaction of the event
	// store (a rebuild runs against the read models).
	RecordAudit(ctx context.Context, e AuditEntry) error
	// ListAudit returns a page of the log, newest first.
	// ListAudit returns a page of the entries f matches, newest first,
	// with their count.
	ListAudit(ctx context.Context, f AuditFilter, p query.Page) ([]AuditEntry, int, error)
}

// Config is what NewOperator needs.
type Config struct {
	// Parking is the projections' parking. Required.
	Parking Parking
	// Rebuilds runs rebuilds. Required.
	Rebuilds Rebuilds
	// Verifier verifies the read models. Required.
	Verifier Verifier
	// Audit is the audit log. Required.
	Audit AuditLog
	// Log receives the audit entries that could not be recorded after
	// their action. Defaults to slog.Default().
	Log *slog.Logger
}

// Operator is the operator's use cases. Every change records who made it
// in the audit log: with the change, in its transaction, where the change
// is a transaction of the event store (replay, skip, keys); right after it
// otherwise (rebuilds).
type Operator struct {
	parking  Parking
	rebuilds Rebuilds
	verifier Verifier
	audit    AuditLog
	log      *slog.Logger
}

// NewOperator returns the operator's use cases on cfg's adapters.
func NewOperator(cfg Config) (*Operator, error) {
	if cfg.Parking == nil || cfg.Rebuilds == nil || cfg.Verifier == nil || cfg.Audit == nil {
		return nil, errors.New("ops.NewOperator: Parking, Rebuilds, Verifier and Audit are required")
	}
	return &Operator{parking: cfg.Parking, rebuilds: cfg.Rebuilds, verifier: cfg.Verifier, audit: cfg.Audit,
		log: cmp.Or(cfg.Log, slog.Default()).With("component", "ops")}, nil
}

// checkProjection validates the name of a projection that parks.
func (o *Operator) checkProjection(name string) error {
	if names := o.parking.Projections(); !slices.Contains(names, name) {
		return apperr.Invalid("projection", "unknown projection %q; one of %s", name, strings.Join(names, ", "))
	}
	return nil
}

// checkBy validates who replays or skips (field "by"); what says what
// they do, for the message when it is missing.
func checkBy(by, what string) (string, error) {
	if by = strings.TrimSpace(by); by == "" {
		return "", apperr.Invalid("by", "is required: say who %s", what)
	}
	return by, CheckActor(by)
}

// ListParked returns the parked aggregates of projection ("" for every
// projection), oldest first.
func (o *Operator) ListParked(ctx context.Context, projection string) ([]ParkedAggregate, error) {
	if projection != "" {
		if err := o.checkProjection(projection); err != nil {
			return nil, err
		}
	}
	return o.parking.List(ctx, projection)
}

// GetParked returns one parked aggregate with its waiting events, or
// apperr.ErrNotFound.
func (o *Operator) GetParked(ctx context.Context, projection, streamID string) (ParkedAggregate, error) {
	if err := o.checkProjection(projection); err != nil {
		return ParkedAggregate{}, err
	}
	return o.parking.Get(ctx, projection, streamID)
}

// IsParked reports whether the merchant's aggregate is parked for
// projection (the detail endpoints say so); another merchant's aggregate
// reads as not parked.
func (o *Operator) IsParked(ctx context.Context, projection, merchantID, streamID string) (ParkedAggregate, bool, error) {
	return o.parking.Parked(ctx, projection, merchantID, streamID)
}

// Replay applies the waiting events of one parked aggregate in version
// order, recorded as done by actor. When all apply, the aggregate is
// unparked; when one fails, the events before it are done and the
// aggregate stays parked behind it with the new reason (the result's
// Error; not an error of Replay).
func (o *Operator) Replay(ctx context.Context, projection, streamID, actor string) (ReplayResult, error) {
	if err := o.checkProjection(projection); err != nil {
		return ReplayResult{}, err
	}
	actor, err := checkBy(actor, "replays")
	if err != nil {
		return ReplayResult{}, err
	}
	return o.parking.Replay(ctx, projection, streamID, func(res ReplayResult) AuditEntry {
		return AuditEntry{Actor: actor, Action: ActionParkedReplay, Target: projection + "/" + streamID,
			Details: map[string]any{"applied": res.Applied, "unparked": res.Unparked, "waiting": res.Waiting, "error": res.Error}}
	})
}

// ReplayAll replays every parked aggregate of projection ("" for all),
// oldest first, and returns one result per aggregate, each recorded as a
// replay by actor. An aggregate replayed meanwhile by someone else is left
// out.
func (o *Operator) ReplayAll(ctx context.Context, projection, actor string) ([]ReplayResult, error) {
	parked, err := o.ListParked(ctx, projection)
	if err != nil {
		return nil, err
	}
	out := []ReplayResult{}
	for _, a := range parked {
		res, err := o.Replay(ctx, a.Projection, a.StreamID, actor)
		if errors.Is(err, apperr.ErrNotFound) {
			continue // replayed meanwhile
		}
		if err != nil {
			return out, err
		}
		out = append(out, res)
	}
	return out, nil
}

// MaxSkipReason bounds a skip's reason, in characters: it is kept in the
// audit log for good, so it is held to an order's cancellation reason's
// length rather than to the request body's.
const MaxSkipReason = 500

// Skip skips the first waiting event of a parked aggregate: it is recorded
// as skipped (who, why) and applied as a version bump, so the next event
// follows it. Without s.EventID, the first event must be one that failed,
// not one that became first by a skip (parking refuses it). The events
// behind it keep waiting (replay them next); when none do, the aggregate is
// unparked.
func (o *Operator) Skip(ctx context.Context, s Skip) (SkipResult, error) {
	if err := o.checkProjection(s.Projection); err != nil {
		return SkipResult{}, err
	}
	if s.Reason = strings.TrimSpace(s.Reason); s.Reason == "" {
		return SkipResult{}, apperr.Invalid("reason", "is required: say why the event is skipped")
	}
	if n := utf8.RuneCountInString(s.Reason); n > MaxSkipReason {
		return SkipResult{}, apperr.Invalid("reason", "must be at most %d characters, got %d", MaxSkipReason, n)
	}
	// Text as the API's decoding takes it: the console's form and the CLI
	// do not pass through it, and the audit log's jsonb refuses a NUL.
	if p := text.Problem(s.Reason, true); p != "" {
		return SkipResult{}, apperr.Invalid("reason", "%s", p)
	}
	var err error
	if s.By, err = checkBy(s.By, "skips the event"); err != nil {
		return SkipResult{}, err
	}
	if s.EventID != "" {
		id, ok := uuid.Parse(s.EventID)
		if !ok {
			return SkipResult{}, apperr.Invalid("event_id", "must be a UUID, got %q", s.EventID)
		}
		s.EventID = id // as stored: lower case
	}
	return o.parking.Skip(ctx, s, func(res SkipResult) AuditEntry {
		return AuditEntry{Actor: s.By, Action: ActionParkedSkip, Target: s.Projection + "/" + s.StreamID,
			Details: map[string]any{"event_id": res.EventID, "version": res.Version, "type": res.Type, "reason": s.Reason, "unparked": res.Unparked}}
	})
}

// StartRebuild starts a rebuild of projection in the background, as done
// by actor, and returns its first progress. The start is recorded right
// after it; should the record fail, the rebuild goes on and the failure
// is logged with everything the record would have held.
func (o *Operator) StartRebuild(ctx context.Context, projection, actor string) (RebuildProgress, error) {
	if err := CheckActor(actor); err != nil {
		return RebuildProgress{}, err
	}
	p, err := o.rebuilds.Start(projection)
	if err != nil {
		return RebuildProgress{}, err
	}
	o.recordAfter(ctx, AuditEntry{Actor: actor, Action: ActionRebuildStart, Target: p.Projection,
		Details: map[string]any{"phase": p.Phase}})
	return p, nil
}

// RebuildStatus returns the progress of the projection's latest rebuild,
// whichever process ran it, or apperr.ErrNotFound.
func (o *Operator) RebuildStatus(projection string) (RebuildProgress, error) {
	return o.rebuilds.Status(projection)
}

// CancelRebuild cancels the projection's running rebuild, as done by
// actor, waits for it to drop its shadow table and returns its last
// progress. The cancel is recorded as StartRebuild records the start.
func (o *Operator) CancelRebuild(ctx context.Context, projection, actor string) (RebuildProgress, error) {
	if err := CheckActor(actor); err != nil {
		return RebuildProgress{}, err
	}
	p, err := o.rebuilds.Cancel(ctx, projection)
	if err != nil {
		return RebuildProgress{}, err
	}
	o.recordAfter(ctx, rebuildCancelled(actor, p.Projection, p))
	return p, nil
}

func rebuildCancelled(actor, projection string, p RebuildProgress) AuditEntry {
	return AuditEntry{Actor: actor, Action: ActionRebuildCancel, Target: projection,
		Details: map[string]any{"phase": p.Phase, "events": p.Events, "rows": p.Rows}}
}

// ErrRebuildCancelAsked is in the error of a rebuild that stopped because
// another process asked for its cancel (Rebuilds.Cancel on an instance
// that does not run it): that process records the cancel.
var ErrRebuildCancelAsked = errors.New("cancelled through DELETE /admin/rebuilds on another instance")

// Rebuild rebuilds projection in the foreground (the CLI), as done by
// actor, calling progress (optional) as it goes; ending ctx cancels it.
// The start is recorded before the rebuild runs (a failed record stops
// it), unless one already runs, a cancel after it, joined to the error.
func (o *Operator) Rebuild(ctx context.Context, projection, actor string, progress func(RebuildProgress)) (RebuildProgress, error) {
	if err := CheckActor(actor); err != nil {
		return RebuildProgress{}, err
	}
	// Refused before it is recorded, as StartRebuild is: Run would fail
	// at once on the lock, and the log would hold a start of a rebuild
	// that never ran beside the one that runs. Two starts in the same
	// moment can still both be recorded, one of them failing so.
	if running, err := o.rebuilds.Running(ctx, projection); err != nil {
		return RebuildProgress{}, err
	} else if running {
		return RebuildProgress{}, &apperr.ConflictError{Detail: "a rebuild of " + projection + " is already running (in another instance or app rebuild)"}
	}
	if err := o.audit.RecordAudit(ctx, AuditEntry{Actor: actor, Action: ActionRebuildStart, Target: projection}); err != nil {
		return RebuildProgress{}, err
	}
	p, err := o.rebuilds.Run(ctx, projection, progress)
	// A cancel asked through an instance's DELETE is recorded there.
	if errors.Is(err, context.Canceled) && !errors.Is(err, ErrRebuildCancelAsked) {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if aerr := o.audit.RecordAudit(actx, rebuildCancelled(actor, projection, p)); aerr != nil {
			err = errors.Join(err, aerr)
		}
	}
	return p, err
}

// recordAfter records an action that is no transaction of the event store,
// right after it succeeded. The action stands when the record fails: the
// failure is logged with everything the record would have held.
func (o *Operator) recordAfter(ctx context.Context, e AuditEntry) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := o.audit.RecordAudit(ctx, e); err != nil {
		o.log.ErrorContext(ctx, "admin action not recorded in the audit log", "actor", e.Actor, "action", e.Action,
			"target", e.Target, "details", e.Details, "error", err)
	}
}

// Verify compares the read models with the event store: every row with
// the fold of its events, every change log with its events.
func (o *Operator) Verify(ctx context.Context, v Verification) (VerifyReport, error) {
	return o.verifier.Verify(ctx, v)
}
