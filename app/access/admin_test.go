package access_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/access"
	"hearth/app/ops"
	"hearth/app/query"
	"hearth/domain/apperr"
)

// fakeKeyStore keeps what it is asked to store and the entries its audit
// functions return, as the adapter does in the change's transaction.
type fakeKeyStore struct {
	spec    access.KeySpec
	key     access.Key
	entries []ops.AuditEntry
}

func (f *fakeKeyStore) InsertKey(_ context.Context, spec access.KeySpec, audit func(access.Key) ops.AuditEntry) (access.NewKey, error) {
	f.spec = spec
	k := access.Key{ID: "9f7a1c52-0000-4000-8000-000000000001", MerchantID: "m1", Role: spec.Role, StaffID: spec.StaffID,
		Name: spec.Name, ExpiresAt: spec.ExpiresAt}
	f.entries = append(f.entries, audit(k))
	return access.NewKey{Key: k, Secret: "hk_secret"}, nil
}

func (f *fakeKeyStore) RevokeKey(_ context.Context, id string, audit func(before, after access.Key) ops.AuditEntry) (access.Key, error) {
	before := f.key
	after := before
	if after.RevokedAt == nil {
		now := time.Now()
		after.RevokedAt = &now
	}
	f.key = after
	f.entries = append(f.entries, audit(before, after))
	return after, nil
}

func (f *fakeKeyStore) RotateKey(_ context.Context, id string, grace time.Duration, audit func(access.Rotation) ops.AuditEntry) (access.Rotation, error) {
	rot := access.Rotation{NewKey: access.NewKey{Key: access.Key{ID: "new", Role: f.key.Role, Name: f.key.Name}, Secret: "hk_new"},
		Previous: f.key}
	f.entries = append(f.entries, audit(rot))
	return rot, nil
}

func (f *fakeKeyStore) ListKeys(context.Context, string, query.Page) ([]access.Key, int, error) {
	return []access.Key{f.key}, 1, nil
}

func (f *fakeKeyStore) MerchantID(context.Context, string) (string, error) {
	return "", apperr.ErrNotFound
}

func newKeys(t *testing.T) (*access.Keys, *fakeKeyStore) {
	t.Helper()
	store := &fakeKeyStore{}
	keys, err := access.NewKeys(store)
	require.NoError(t, err)
	return keys, store
}

func requireFields(t *testing.T, err error, fields ...string) {
	t.Helper()
	var invalid *apperr.ValidationError
	require.ErrorAs(t, err, &invalid)
	var got []string
	for _, f := range invalid.Fields {
		got = append(got, f.Field)
	}
	require.Equal(t, fields, got)
}

// IssueKey checks the spec, then who issues it, and passes the canonical
// spec on; the audit entry names the key and what it may do.
func TestIssueKeyChecksAndRecords(t *testing.T) {
	t.Parallel()
	keys, store := newKeys(t)
	ctx := t.Context()
	_, err := keys.IssueKey(ctx, access.KeySpec{Role: "root"}, "")
	requireFields(t, err, "role")
	_, err = keys.IssueKey(ctx, access.KeySpec{Role: access.Admin}, " ")
	requireFields(t, err, "by")
	require.Empty(t, store.entries)

	expires := time.Now().Add(time.Hour)
	k, err := keys.IssueKey(ctx, access.KeySpec{MerchantName: " Acme ", Role: access.Operator, Name: " ci ", ExpiresAt: &expires}, "ops:ada")
	require.NoError(t, err)
	require.Equal(t, "hk_secret", k.Secret)
	require.Equal(t, "Acme", store.spec.MerchantName, "the store gets the canonical spec")
	require.Equal(t, "ci", store.spec.Name)
	require.Equal(t, []ops.AuditEntry{{Actor: "ops:ada", Action: ops.ActionKeyCreate, Target: k.ID,
		Details: map[string]any{"role": access.Operator, "name": "ci", "merchant_id": "m1", "expires_at": store.spec.ExpiresAt}}},
		store.entries)
}

// RevokeKey and RotateKey check the id, the grace and who acts; the audit
// entries say whether the key was revoked already, and which key replaced
// it after what grace.
func TestRevokeAndRotateRecord(t *testing.T) {
	t.Parallel()
	keys, store := newKeys(t)
	ctx := t.Context()
	const id = "9F7A1C52-0000-4000-8000-000000000002"
	_, err := keys.RevokeKey(ctx, "abc", "ops:ada")
	requireFields(t, err, "id")
	_, err = keys.RevokeKey(ctx, id, "")
	requireFields(t, err, "by")
	_, err = keys.RotateKey(ctx, id, -time.Second, "ops:ada")
	requireFields(t, err, "grace")
	_, err = keys.RotateKey(ctx, id, access.MaxGrace+time.Second, "ops:ada")
	requireFields(t, err, "grace")
	_, err = keys.RotateKey(ctx, id, 500*time.Nanosecond, "ops:ada")
	requireFields(t, err, "grace")
	require.Empty(t, store.entries)

	store.key = access.Key{ID: "9f7a1c52-0000-4000-8000-000000000002", Role: access.Worker, StaffID: "s1", Name: "van"}
	rot, err := keys.RotateKey(ctx, id, 90*time.Minute, "ops:bob")
	require.NoError(t, err)
	require.Equal(t, ops.AuditEntry{Actor: "ops:bob", Action: ops.ActionKeyRotate, Target: store.key.ID,
		Details: map[string]any{"role": access.Worker, "name": "van", "staff_id": "s1", "new_key_id": rot.ID, "grace": "1h30m0s"}},
		store.entries[0])

	for _, already := range []bool{false, true} {
		_, err := keys.RevokeKey(ctx, id, "ops:ada")
		require.NoError(t, err)
		e := store.entries[len(store.entries)-1]
		require.Equal(t, ops.ActionKeyRevoke, e.Action)
		require.Equal(t, store.key.ID, e.Target, "the canonical id")
		require.Equal(t, already, e.Details["already_revoked"])
	}
}
