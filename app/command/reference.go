package command

import (
	"context"
	"errors"
	"fmt"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/reference"
	"hearth/domain/uuid"
)

// RecordStore stores one kind of reference record.
type RecordStore[T any] interface {
	Insert(ctx context.Context, v *T) error
	// Update loads the merchant's record (apperr.ErrNotFound when it has
	// none), lets fn change it and saves it with the audit entry fn
	// returns (nil for none), in one transaction.
	Update(ctx context.Context, merchantID, id string, fn func(v *T) (*Audit, error)) (T, error)
}

// Records creates and updates one kind of reference record (customers,
// staff members, catalog items): validate, stamp, store.
type Records[T any, P reference.Record[T]] struct {
	store RecordStore[T]
	audit RecordAudit[T]
}

// RecordAudit is the audit entry of a change by actor of a record from
// before to after, or nil for a change the audit log does not record.
type RecordAudit[T any] func(actor string, before, after T) *Audit

// Audited returns h recording each change audit names in the audit log,
// in the change's transaction.
func (h Records[T, P]) Audited(audit RecordAudit[T]) Records[T, P] {
	h.audit = audit
	return h
}

// The audit actions of a change of a staff member's activity.
const (
	ActionStaffMemberDeactivate = "staff_member.deactivate"
	ActionStaffMemberActivate   = "staff_member.activate"
)

// StaffActivity audits a change of a staff member's activity: an inactive
// staff member's worker keys and console sessions stop working, and work
// again when they are made active, so it is an access change, recorded as
// a key's revocation is. Their other fields are the merchant's records,
// not access: not recorded.
func StaffActivity(actor string, before, after reference.StaffMember) *Audit {
	if before.Active == after.Active {
		return nil
	}
	action := ActionStaffMemberDeactivate
	if after.Active {
		action = ActionStaffMemberActivate
	}
	return &Audit{Actor: actor, Action: action, Target: "staff_member/" + after.ID,
		Details: map[string]any{"merchant_id": after.MerchantID}}
}

// NewRecords checks its dependency.
func NewRecords[T any, P reference.Record[T]](store RecordStore[T]) (Records[T, P], error) {
	if store == nil {
		return Records[T, P]{}, errors.New("command.NewRecords: nil store")
	}
	return Records[T, P]{store: store}, nil
}

// Create validates v and stores it under a new id for the merchant.
func (h Records[T, P]) Create(ctx context.Context, merchantID string, v T, now time.Time) (T, error) {
	p := P(&v)
	if err := p.Normalize(); err != nil {
		return v, err
	}
	k := p.Key()
	now = event.Instant(now)
	*k.ID, *k.MerchantID, *k.CreatedAt, *k.UpdatedAt = uuid.New(), merchantID, now, now
	if err := h.store.Insert(ctx, &v); err != nil {
		return v, err
	}
	return v, nil
}

// Update applies actor's patch to the merchant's record and validates the
// result. A patch that changes nothing leaves updated_at alone.
func (h Records[T, P]) Update(ctx context.Context, merchantID, actor, id string, patch func(v *T), now time.Time) (T, error) {
	return h.update(ctx, merchantID, actor, id, nil, patch, now)
}

// UpdateSeen is Update for a client that showed the record before its
// user changed it (the console's edit forms, which send every field):
// seen is the updated_at it showed. A record changed since then is not
// patched (the form would write back the values it showed over the
// change): a *apperr.ConflictError.
func (h Records[T, P]) UpdateSeen(ctx context.Context, merchantID, actor, id string, seen time.Time, patch func(v *T), now time.Time) (T, error) {
	return h.update(ctx, merchantID, actor, id, func(v *T) error {
		if at := *P(v).Key().UpdatedAt; !at.Equal(seen) {
			return &apperr.ConflictError{Detail: fmt.Sprintf("%s was changed at %s, after it was shown at %s: read it again, then change it",
				id, at.UTC().Format(time.RFC3339Nano), seen.UTC().Format(time.RFC3339Nano))}
		}
		return nil
	}, patch, now)
}

func (h Records[T, P]) update(ctx context.Context, merchantID, actor, id string, check func(v *T) error, patch func(v *T), now time.Time) (T, error) {
	return h.store.Update(ctx, merchantID, id, func(v *T) (*Audit, error) {
		if check != nil {
			if err := check(v); err != nil {
				return nil, err
			}
		}
		before := *v
		patch(v)
		p := P(v)
		if err := p.Normalize(); err != nil {
			return nil, err
		}
		if equal(before, *v) {
			return nil, nil
		}
		*p.Key().UpdatedAt = event.Instant(now)
		if h.audit == nil {
			return nil, nil
		}
		return h.audit(actor, before, *v), nil
	})
}

func equal[T any](a, b T) bool { return any(a) == any(b) }
