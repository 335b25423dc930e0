package ops

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ActionKeyringRewrap is the audit log's action of re-sealing the secrets
// Hearth keeps under the active master key.
const ActionKeyringRewrap = "keyring.rewrap"

// Secrets re-seals the secrets Hearth keeps at rest (webhook signing
// secrets): every one in clear, and with all, every one sealed by another
// master key than the active one. It returns how many records it rewrote.
type Secrets interface {
	SealSecrets(ctx context.Context, all bool) (int, error)
	// StillSealed counts the secrets sealed by another master key than
	// the active one, per master key id.
	StillSealed(ctx context.Context) (map[string]int, error)
}

// DataKeys re-seals the customers' data keys (adapters/vault) under the
// active master key; the events they seal are not touched.
type DataKeys interface {
	Rewrap(ctx context.Context) (int, error)
	// StillSealed counts the data keys sealed by another master key than
	// the active one, per master key id.
	StillSealed(ctx context.Context) (map[string]int, error)
}

// Rewrapped counts what Rewrap re-sealed.
type Rewrapped struct {
	WebhookEndpoints int
	DataKeys         int
	// Remaining counts, per master key id other than the active one, the
	// secrets and data keys still sealed by it once the passes ended:
	// written meanwhile by an instance that still seals with it. The
	// rewrap is complete, and the other keys can go, only when it is
	// empty.
	Remaining map[string]int
}

// RewrapIncompleteError is a rewrap after which secrets or data keys are
// still sealed by another master key than the active one: an instance
// still seals with it (not restarted with the new key first). Removing
// that key would leave them unopenable.
type RewrapIncompleteError struct{ Remaining map[string]int }

func (e *RewrapIncompleteError) Error() string {
	ids := slices.Sorted(maps.Keys(e.Remaining))
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%d by %s", e.Remaining[id], id)
	}
	return fmt.Sprintf("secrets or data keys still sealed by another master key after the rewrap (%s): an instance still seals with it; "+
		"keep that key configured, restart every instance with the new key first in MASTER_KEY, and run the rewrap again (docs/operations.md, Master keys)",
		strings.Join(parts, ", "))
}

// Rewrap re-seals every secret and every data key under the active master
// key, activeKey, after a new master key was put first (docs/operations.md,
// master-key rotation), and records who did it in the audit log; the old
// key can go once it is done. Running it again rewrites nothing.
func Rewrap(ctx context.Context, secrets Secrets, keys DataKeys, audit AuditLog, actor, activeKey string) (Rewrapped, error) {
	var out Rewrapped
	if secrets == nil || keys == nil || audit == nil {
		return out, errors.New("ops.Rewrap: secrets, keys and audit are required")
	}
	if err := CheckActor(actor); err != nil {
		return out, err
	}
	var err error
	if out.WebhookEndpoints, err = secrets.SealSecrets(ctx, true); err != nil {
		return out, fmt.Errorf("re-seal secrets: %w", err)
	}
	if out.DataKeys, err = keys.Rewrap(ctx); err != nil {
		return out, fmt.Errorf("re-seal data keys: %w", err)
	}
	// What an instance still sealing with an older key wrote behind the
	// passes: the older key is still needed for it.
	out.Remaining = map[string]int{}
	for _, count := range []func(context.Context) (map[string]int, error){secrets.StillSealed, keys.StillSealed} {
		left, err := count(ctx)
		if err != nil {
			return out, fmt.Errorf("count what is still sealed by other master keys: %w", err)
		}
		for id, n := range left {
			out.Remaining[id] += n
		}
	}
	details := map[string]any{"webhook_endpoints": out.WebhookEndpoints, "data_keys": out.DataKeys, "complete": len(out.Remaining) == 0}
	if len(out.Remaining) > 0 {
		details["remaining"] = out.Remaining
	}
	if err := audit.RecordAudit(ctx, AuditEntry{Actor: actor, Action: ActionKeyringRewrap, Target: "master_key/" + activeKey, Details: details}); err != nil {
		return out, err
	}
	if len(out.Remaining) > 0 {
		return out, &RewrapIncompleteError{Remaining: out.Remaining}
	}
	return out, nil
}
