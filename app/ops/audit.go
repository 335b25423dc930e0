package ops

import (
	"strings"
	"time"
	"unicode"

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
)

// AuditEntry is one admin action: who did what to what, and when.
type AuditEntry struct {
	ID int64     `json:"id"`
	At time.Time `json:"at"`
	// Actor is "key:<admin key id>" over HTTP, the CLI's --by or
	// "cli:$USER" otherwise.
	Actor  string `json:"actor"`
	Action string `json:"action"`
	// Target is a key id, "projection/aggregate id" or a projection.
	Target  string         `json:"target"`
	Details map[string]any `json:"details"`
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
