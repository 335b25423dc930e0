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

// Rewrap re-seals every secret under the active master key, activeKey,
// after a new master key was put first (docs/operations.md, master-key
// rotation), and records who did it in the audit log; the old key can go
// once it is done. Running it again rewrites nothing.
func Rewrap(ctx context.Context, secrets Secrets, audit AuditLog, actor, activeKey string) (int, error) {
	if secrets == nil || audit == nil {
		return 0, errors.New("ops.Rewrap: secrets and audit are required")
	}
	if err := CheckActor(actor); err != nil {
		return 0, err
	}
	n, err := secrets.SealSecrets(ctx, true)
	if err != nil {
		return n, fmt.Errorf("re-seal secrets: %w", err)
	}
	return n, audit.RecordAudit(ctx, AuditEntry{Actor: actor, Action: ActionKeyringRewrap, Target: "master_key/" + activeKey,
		Details: map[string]any{"webhook_endpoints": n}})
}
