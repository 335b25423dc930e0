package ops

import (
	"context"
	"errors"
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
	Settle        time.Duration // not yet used
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
	// Not yet set.
	SecondPassDue     time.Time
	SecondPassPending bool
	SecondPassError   error
}

// PendingErasure is the record of a second pass not run yet.
type PendingErasure struct {
	Request ErasureRequest
	Due     time.Time
}

// RunDue runs the second passes due: none yet.
func (x *Erasures) RunDue(context.Context) (int, error) { return 0, nil }

// Pending lists the second passes not run yet: none known yet.
func (x *Erasures) Pending(context.Context) ([]PendingErasure, error) { return nil, nil }

// ErasureStore erases a subject in one transaction of the event store and
// records audit's entry there (pubsub.Store.EraseSubject). It is safe to
// run again: a run finishes what an earlier one left.
type ErasureStore interface {
	EraseSubject(ctx context.Context, req ErasureRequest, audit func(Erasure) AuditEntry) (Erasure, error)
}

// Erasures is the use case of erasing a customer or a staff member.
type Erasures struct {
	store ErasureStore
	// settle is how long an erased key may still be cached by another
	// instance (vault.CacheFor): a write sealed with it meanwhile is marked
	// by the second pass.
	settle time.Duration
	Wait   func(ctx context.Context, d time.Duration) error
}

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
// plans end (no visit is created for a person erased). After the first pass
// it waits until no instance can still hold the key, then runs a second
// pass for writes sealed meanwhile. Erasing again succeeds with the same
// result. An unknown subject, or another merchant's, is apperr.ErrNotFound.
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
	action := ActionCustomerErase
	if req.SubjectType == event.SubjectStaffMember {
		action = ActionStaffMemberErase
	}
	audit := func(e Erasure) AuditEntry {
		return AuditEntry{Actor: req.By, Action: action, Target: req.SubjectType + "/" + req.SubjectID,
			Details: map[string]any{"merchant_id": req.MerchantID, "streams": e.Streams, "plans_ended": e.PlansEnded}}
	}
	first, err := x.pass(ctx, req, audit)
	if err != nil {
		return Erasure{}, err
	}
	if err := x.Wait(ctx, x.settle); err != nil {
		return Erasure{}, err
	}
	second, err := x.pass(ctx, req, audit)
	if err != nil {
		return Erasure{}, err
	}
	second.Streams += first.Streams
	second.IdempotentAnswers += first.IdempotentAnswers
	second.PlansEnded += first.PlansEnded
	second.Position = max(first.Position, second.Position)
	return second, nil
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
