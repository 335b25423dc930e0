package access

import (
	"context"
	"errors"
	"time"

	"hearth/app/ops"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/uuid"
)

// KeyStore keeps the API keys (refdata.Store). Each change commits in one
// transaction with the audit entry that its audit function returns for
// the outcome.
type KeyStore interface {
	// InsertKey creates a key as the (checked) spec says, with a new
	// secret. An operator or worker key's merchant is created when it is
	// named and missing; a worker's staff member must be active.
	InsertKey(ctx context.Context, spec KeySpec, audit func(Key) ops.AuditEntry) (NewKey, error)
	// RevokeKey revokes a key at once (a revoked key stays as it is); audit
	// is given the key before and after. An unknown id is
	// apperr.ErrNotFound.
	RevokeKey(ctx context.Context, id string, audit func(before, after Key) ops.AuditEntry) (Key, error)
	// RotateKey replaces a key that is neither revoked nor expired (the
	// rules key.revoked and key.expired); see Keys.RotateKey.
	RotateKey(ctx context.Context, id string, grace time.Duration, audit func(Rotation) ops.AuditEntry) (Rotation, error)
	// ListKeys returns a page of keys, newest first: every key, or one
	// merchant's.
	ListKeys(ctx context.Context, merchantID string, p query.Page) ([]Key, int, error)
	// MerchantID returns the id of the merchant with that name, or
	// apperr.ErrNotFound.
	MerchantID(ctx context.Context, name string) (string, error)
}

// Keys is the admin's use cases of API keys: create, list, revoke and
// rotate. Every change is recorded in the audit log, in its transaction,
// as done by its actor.
type Keys struct {
	store KeyStore
	now   func() time.Time
}

// NewKeys returns the key use cases on store.
func NewKeys(store KeyStore) (*Keys, error) {
	if store == nil {
		return nil, errors.New("access.NewKeys: nil store")
	}
	return &Keys{store: store, now: time.Now}, nil
}

// IssueKey creates a key as spec says, as done by actor. Bad input is a
// *apperr.ValidationError naming the field.
func (k *Keys) IssueKey(ctx context.Context, spec KeySpec, actor string) (NewKey, error) {
	spec, err := spec.Check(k.now())
	if err != nil {
		return NewKey{}, err
	}
	if err := ops.CheckActor(actor); err != nil {
		return NewKey{}, err
	}
	return k.store.InsertKey(ctx, spec, func(key Key) ops.AuditEntry {
		return ops.AuditEntry{Actor: actor, Action: ops.ActionKeyCreate, Target: key.ID, Details: auditDetails(key)}
	})
}

// RevokeKey revokes a key at once, as done by actor. Revoking a revoked
// key changes nothing (and is recorded). An unknown id is
// apperr.ErrNotFound.
func (k *Keys) RevokeKey(ctx context.Context, id, actor string) (Key, error) {
	id, err := checkKeyID(id)
	if err != nil {
		return Key{}, err
	}
	if err := ops.CheckActor(actor); err != nil {
		return Key{}, err
	}
	return k.store.RevokeKey(ctx, id, func(before, after Key) ops.AuditEntry {
		details := auditDetails(after)
		details["already_revoked"] = before.RevokedAt != nil
		return ops.AuditEntry{Actor: actor, Action: ops.ActionKeyRevoke, Target: id, Details: details}
	})
}

// RotateKey replaces a key, as done by actor: a new key (new id, new
// secret) with the old one's merchant, role, staff member, name and
// expiry. With grace 0 the old key is revoked at once; otherwise it keeps
// working for grace (never beyond its own expiry, at most MaxGrace), so
// that clients can switch. A revoked or expired key cannot be rotated
// (create a new one).
func (k *Keys) RotateKey(ctx context.Context, id string, grace time.Duration, actor string) (Rotation, error) {
	id, err := checkKeyID(id)
	if err != nil {
		return Rotation{}, err
	}
	if err := CheckGrace(grace); err != nil {
		return Rotation{}, err
	}
	if err := ops.CheckActor(actor); err != nil {
		return Rotation{}, err
	}
	return k.store.RotateKey(ctx, id, grace, func(rot Rotation) ops.AuditEntry {
		details := auditDetails(rot.Previous)
		details["new_key_id"] = rot.ID
		details["grace"] = grace.String()
		return ops.AuditEntry{Actor: actor, Action: ops.ActionKeyRotate, Target: id, Details: details}
	})
}

// ListKeys returns a page of keys, newest first: every key, or one
// merchant's (merchantID). Never a secret or a hash.
func (k *Keys) ListKeys(ctx context.Context, merchantID string, p query.Page) ([]Key, int, error) {
	return k.store.ListKeys(ctx, merchantID, p)
}

// MerchantID returns the id of the merchant with that name, or
// apperr.ErrNotFound.
func (k *Keys) MerchantID(ctx context.Context, name string) (string, error) {
	return k.store.MerchantID(ctx, name)
}

// auditDetails is what the audit log keeps of a key.
func auditDetails(k Key) map[string]any {
	d := map[string]any{"role": k.Role, "name": k.Name}
	if k.MerchantID != "" {
		d["merchant_id"] = k.MerchantID
	}
	if k.StaffID != "" {
		d["staff_id"] = k.StaffID
	}
	if k.ExpiresAt != nil {
		d["expires_at"] = k.ExpiresAt
	}
	return d
}

func checkKeyID(id string) (string, error) {
	canonical, ok := uuid.Parse(id)
	if !ok {
		return "", apperr.Invalid("id", "must be a UUID, got %q", id)
	}
	return canonical, nil
}
