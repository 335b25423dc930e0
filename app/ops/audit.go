package ops

import (
	"context"
	"errors"
	"fmt"
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
	// webhook_endpoint, merchant: its settings).
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
	return t.log.ListAudit(ctx, AuditFilter{}, p)
}

// AuditFilter narrows the audit log to one target ("customer/<id>", a key
// id), one action, or both; empty fields match every entry. An auditor's
// question is about one person or one key, asked long after the entry
// was written: a filter finds it however far back it is, where the newest
// pages would not.
type AuditFilter struct {
	Target string
	Action string
}

// MaxAuditFilter bounds a filter's field, in bytes: a target is at most a
// kind and an id, an action a few words.
const MaxAuditFilter = 200

// Problem says what is wrong with f, naming the field ("target",
// "action"); "" when nothing. The ports say it their way (a query
// parameter's 400, a flag's usage error).
func (f AuditFilter) Problem() (field, problem string) {
	for _, v := range []struct{ field, value string }{{"target", f.Target}, {"action", f.Action}} {
		switch {
		case len(v.value) > MaxAuditFilter:
			return v.field, fmt.Sprintf("must be at most %d bytes", MaxAuditFilter)
		case strings.ContainsFunc(v.value, unicode.IsControl):
			return v.field, "must not contain control characters"
		}
	}
	return "", ""
}

// ListAuditOf returns a page of the entries f matches, newest first, with
// their count.
func (t *AuditTrail) ListAuditOf(ctx context.Context, f AuditFilter, p query.Page) ([]AuditEntry, int, error) {
	if field, problem := f.Problem(); problem != "" {
		return nil, 0, apperr.Invalid(field, "%s", problem)
	}
	return t.log.ListAudit(ctx, f, p)
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
