package ops

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode"

	"hearth/app/query"
	"hearth/domain/apperr"
)

// Admin actions recorded in the audit log.
const (
	ActionKeyCreate     = "key.create"
	ActionKeyRevoke     = "key.revoke"
	ActionKeyRotate     = "key.rotate"
	ActionParkedReplay  = "parked.replay"
	ActionParkedSkip    = "parked.skip"
	ActionRebuildStart  = "rebuild.start"
	ActionRebuildCancel = "rebuild.cancel"
	// ActionProjectionsRewind is `app projections rewind`'s: the command
	// line's own action, listed by GET /admin/audit with the others.
	ActionProjectionsRewind = "projections.rewind"
)

// AuditEntry is one admin action: who did what to what, and when.
type AuditEntry struct {
	ID int64
	At time.Time
	// Actor is "key:<key id>" over HTTP (an operator key exports, erases
	// and writes webhook endpoints), the CLI's --by or
	// "cli:$USER" otherwise.
	Actor  string
	Action string
	// Target is a key id, "projection/aggregate id", a projection, or
	// "<kind>/<id>" (customer, staff_member, master_key,
	// webhook_endpoint).
	Target  string
	Details map[string]any
}

// AuditTrail is the use case of reading the audit log. (Every change
// records itself through its own use case: Operator, access.Keys.)
type AuditTrail struct {
	log AuditLog
}

// NewAuditTrail returns the audit log's reader.
func NewAuditTrail(log AuditLog) (*AuditTrail, error) {
	if log == nil {
		return nil, errors.New("ops.NewAuditTrail: nil log")
	}
	return &AuditTrail{log: log}, nil
}

// ListAudit returns a page of the audit log, newest first.
func (t *AuditTrail) ListAudit(ctx context.Context, p query.Page) ([]AuditEntry, int, error) {
	return t.log.ListAudit(ctx, p)
}

// CheckActor validates who an admin action is recorded for (field "by").
func CheckActor(actor string) error {
	switch {
	case strings.TrimSpace(actor) == "":
		return apperr.Invalid("by", "is required: say who does this")
	case len(actor) > 200:
		return apperr.Invalid("by", "must be at most 200 bytes")
	case strings.ContainsFunc(actor, unicode.IsControl):
		return apperr.Invalid("by", "must not contain control characters")
	}
	return nil
}
