package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/uuid"
)

// The audit actions of erasures (GDPR article 17).
const (
	ActionCustomerErase    = "customer.erase"
	ActionStaffMemberErase = "staff_member.erase"
)

// ErasureRequest is one erasure: who asks, which subject of which merchant,
// and the confirmation, which must repeat the subject's id (an erasure
// cannot be undone).
type ErasureRequest struct {
	By            string
	MerchantID    string
	SubjectType   string // event.SubjectCustomer or event.SubjectStaffMember
	SubjectID     string
	Confirm       string
	CorrelationID string
	// SecondPass marks the pass run once no instance can still hold the
	// erased key: it clears the record of the pending second pass. A first
	// pass records it instead, due Settle after its commit, in its own
	// transaction: if the caller is gone or the process dies before the
	// second pass, a worker (Erasures.RunDue) still runs it.
	// A second pass clears the record due at Due (the first pass's
	// SecondPassDue), not a later one.
	SecondPass bool
	Settle     time.Duration
	Due        time.Time
}

// Erasure is what an erasure did.
type Erasure struct {
	SubjectType string
	SubjectID   string
	// ErasedAt is when the subject was first erased (erasing again keeps
	// it).
	ErasedAt time.Time
	// Streams counts the aggregates marked by this run (PersonalDataErased
	// appended); Position is the last such event's store position, for
	// read-your-writes (0 when none).
	Streams  int
	Position int64
	// IdempotentAnswers counts the stored answers deleted.
	IdempotentAnswers int
	// PlansEnded counts the customer's service plans this run ended: a
	// plan of a person erased creates no more visits.
	PlansEnded int
	// SecondPassDue is when the second pass fell due (or falls due): by
	// then no instance can still seal with the erased key.
	// SecondPassPending says it has not run yet (its error, if it failed,
	// is SecondPassError): the record of it stays, and the erasure worker
	// (Erasures.RunDue) runs it; only then is the erasure complete.
	SecondPassDue     time.Time
	SecondPassPending bool
	SecondPassError   error
}

// PendingErasure is the record of a second pass not run yet.
type PendingErasure struct {
	Request ErasureRequest
	Due     time.Time
}

// ErasureStore erases a subject in one transaction of the event store and
// records audit's entry there (pubsub.Store.EraseSubject). It is safe to
// run again: a run finishes what an earlier one left.
type ErasureStore interface {
	EraseSubject(ctx context.Context, req ErasureRequest, audit func(Erasure) AuditEntry) (Erasure, error)
	// PendingErasures lists the second passes not run yet, the earliest
	// due first; dueOnly keeps those due now (by the store's clock, the
	// one that set their due times).
	PendingErasures(ctx context.Context, dueOnly bool, limit int) ([]PendingErasure, error)
}

// Erasures is the use case of erasing a customer or a staff member.
type Erasures struct {
	store ErasureStore
	// settle is how long an erased key may still be cached by another
	// instance (vault.CacheFor): a write sealed with it meanwhile is marked
	// by the second pass.
	settle time.Duration
	// Wait waits d or until ctx is done (ctx.Err()); a timer unless a test
	// replaces it.
	Wait func(ctx context.Context, d time.Duration) error
}

// secondPassTimeout bounds the second pass run for a caller that has gone
// (it no longer bounds it): past it, the worker runs it.
const secondPassTimeout = time.Minute

// NewErasures returns the use case; settle is how long other instances may
// still hold the erased key (vault.CacheFor).
func NewErasures(store ErasureStore, settle time.Duration) (*Erasures, error) {
	if store == nil {
		return nil, errors.New("ops.NewErasures: nil store")
	}
	return &Erasures{store: store, settle: settle, Wait: sleepCtx}, nil
}

// RuleEraseUnconfirmed is an erasure whose request does not confirm it.
const RuleEraseUnconfirmed = "erase.unconfirmed"

// Erase erases a subject: its reference row keeps its id and nothing else,
// its data key is deleted (every sealed field of its events then reads as
// erased everywhere), each of its aggregates gets PersonalDataErased (the
// read models fold it again, forgetting the fields in rows and change
// log), the stored answers naming it are deleted, and a customer's service
// plans end (no visit is created for a person erased). The first pass
// records a second one, due once no instance can still hold the key; Erase
// waits for it and runs it (for writes sealed meanwhile), even when ctx is
// cancelled during the wait: an erasure is complete only after it. If it
// cannot (the pass fails, or the process dies), the record stays and the
// erasure worker runs it (RunDue); the result says so (SecondPassPending).
// Erasing again succeeds with the same result. An unknown subject, or
// another merchant's, is apperr.ErrNotFound.
func (x *Erasures) Erase(ctx context.Context, req ErasureRequest) (Erasure, error) {
	req.By = strings.TrimSpace(req.By)
	if err := CheckActor(req.By); err != nil {
		return Erasure{}, err
	}
	id, ok := uuid.Parse(req.SubjectID)
	if !ok {
		return Erasure{}, apperr.Invalid("id", "must be a UUID, got %q", req.SubjectID)
	}
	req.SubjectID = id
	if req.SubjectType != event.SubjectCustomer && req.SubjectType != event.SubjectStaffMember {
		return Erasure{}, errors.New("erase: unknown subject type " + req.SubjectType)
	}
	if c, ok := uuid.Parse(req.Confirm); !ok || c != id {
		return Erasure{}, apperr.Invalid("confirm", "must repeat the id of the %s to erase (%s): erasure cannot be undone", strings.ReplaceAll(req.SubjectType, "_", " "), id)
	}
	if req.MerchantID == "" {
		return Erasure{}, errors.New("erase: no merchant")
	}
	req.Settle, req.SecondPass = x.settle, false
	first, err := x.pass(ctx, req, erasureAudit(req))
	if err != nil {
		return Erasure{}, err
	}
	// The first pass has committed: the caller going away (a client that
	// disconnects, Ctrl-C) must not leave the erasure half done, so the
	// wait and the second pass ignore its cancellation; the timeout bounds
	// them, and the worker runs a second pass left undone.
	done, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.settle+secondPassTimeout)
	defer cancel()
	if err := x.Wait(done, x.settle); err != nil {
		first.SecondPassPending, first.SecondPassError = true, err
		return first, nil
	}
	req.SecondPass, req.Due = true, first.SecondPassDue
	second, err := x.pass(done, req, erasureAudit(req))
	if err != nil {
		first.SecondPassPending, first.SecondPassError = true, err
		return first, nil
	}
	second.Streams += first.Streams
	second.IdempotentAnswers += first.IdempotentAnswers
	second.PlansEnded += first.PlansEnded
	second.Position = max(first.Position, second.Position)
	second.SecondPassDue = first.SecondPassDue
	return second, nil
}

// erasureAudit is the audit entry of one pass of req.
func erasureAudit(req ErasureRequest) func(Erasure) AuditEntry {
	action := ActionCustomerErase
	if req.SubjectType == event.SubjectStaffMember {
		action = ActionStaffMemberErase
	}
	pass := 1
	if req.SecondPass {
		pass = 2
	}
	return func(e Erasure) AuditEntry {
		return AuditEntry{Actor: req.By, Action: action, Target: req.SubjectType + "/" + req.SubjectID,
			Details: map[string]any{"merchant_id": req.MerchantID, "streams": e.Streams, "plans_ended": e.PlansEnded, "pass": pass}}
	}
}

// dueBatch bounds the second passes one RunDue round runs.
const dueBatch = 100

// RunDue runs the second passes due and not run yet: those whose erasure's
// caller went away or whose process died before them. It is the erasure
// worker's round (one leader at a time; a pass run twice, by a leader
// cut off meanwhile, finds nothing left). It returns how many it ran, and
// the first error met: the record of a pass that failed stays, for the
// next round.
func (x *Erasures) RunDue(ctx context.Context) (int, error) {
	due, err := x.store.PendingErasures(ctx, true, dueBatch)
	if err != nil {
		return 0, err
	}
	ran := 0
	var first error
	for _, p := range due {
		req := p.Request
		req.SecondPass = true
		if _, err := x.pass(ctx, req, erasureAudit(req)); err != nil {
			if first == nil {
				first = fmt.Errorf("second pass of the erasure of %s %s: %w", req.SubjectType, req.SubjectID, err)
			}
			continue
		}
		ran++
	}
	return ran, first
}

// Pending lists the second passes not run yet (due or not), the earliest
// first: an erasure is complete only once its second pass has run.
func (x *Erasures) Pending(ctx context.Context) ([]PendingErasure, error) {
	return x.store.PendingErasures(ctx, false, 0)
}

// passAttempts is how many times a pass is tried when it meets a write to
// one of the subject's streams.
const passAttempts = 5

// pass runs one pass of the erasure, again when a write to one of the
// subject's streams took the version the pass meant to append at (a
// conflict): the erasure states no version, and a pass is all or nothing,
// so running it again is safe, and a customer whose orders are written to
// often is erased all the same.
func (x *Erasures) pass(ctx context.Context, req ErasureRequest, audit func(Erasure) AuditEntry) (Erasure, error) {
	for attempt := 1; ; attempt++ {
		e, err := x.store.EraseSubject(ctx, req, audit)
		var conflict *apperr.ConflictError
		if err == nil || !errors.As(err, &conflict) || attempt == passAttempts {
			return e, err
		}
		if err := x.Wait(ctx, time.Duration(attempt)*10*time.Millisecond); err != nil {
			return Erasure{}, err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
