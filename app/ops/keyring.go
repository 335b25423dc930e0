package ops

import (
	"context"
	"errors"
	"fmt"
)

// ActionKeyringRewrap is the audit log's action of re-sealing the secrets
// Hearth keeps under the active master key.
const ActionKeyringRewrap = "keyring.rewrap"

// Secrets re-seals the secrets Hearth keeps at rest (webhook signing
// secrets): every one in clear, and with all, every one sealed by another
// master key than the active one. It returns how many records it rewrote.
type Secrets interface {
	SealSecrets(ctx context.Context, all bool) (int, error)
}

// DataKeys re-seals the customers' data keys (adapters/vault) under the
// active master key; the events they seal are not touched.
type DataKeys interface {
	Rewrap(ctx context.Context) (int, error)
}

// Rewrapped counts what Rewrap re-sealed.
type Rewrapped struct {
	WebhookEndpoints int
	DataKeys         int
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
	return out, audit.RecordAudit(ctx, AuditEntry{Actor: actor, Action: ActionKeyringRewrap, Target: "master_key/" + activeKey,
		Details: map[string]any{"webhook_endpoints": out.WebhookEndpoints, "data_keys": out.DataKeys}})
}
