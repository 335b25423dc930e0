package refdata

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/uptrace/bun"

	"hearth/app/ops"
	"hearth/app/query"
)

// WriteAudit records one admin action through db: pass the action's own
// transaction (a bun.Tx on the event store) so that the action and its
// record commit together. At is the transaction's time.
func WriteAudit(ctx context.Context, db bun.IDB, e ops.AuditEntry) error {
	if err := ops.CheckActor(e.Actor); err != nil {
		return err
	}
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	details, err := json.Marshal(e.Details)
	if err != nil {
		return fmt.Errorf("audit details: %w", err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO admin_audit (actor, action, target, details) VALUES (?, ?, ?, ?::jsonb)`,
		e.Actor, e.Action, e.Target, string(details)); err != nil {
		return fmt.Errorf("record %s in the audit log: %w", e.Action, err)
	}
	return nil
}

// RecordAudit records an admin action that is not a transaction of the
// event store (a rebuild runs against the read models), right after it.
func (s *Store) RecordAudit(ctx context.Context, e ops.AuditEntry) error {
	return WriteAudit(ctx, s.db, e)
}

// ListAudit returns a page of the entries f matches, newest first (the
// indexes of migration eventstore/031 read one target's or one action's
// entries alone).
func (s *Store) ListAudit(ctx context.Context, f ops.AuditFilter, p query.Page) ([]ops.AuditEntry, int, error) {
	items := []ops.AuditEntry{}
	q := s.db.NewSelect().Model(&items).ModelTableExpr("admin_audit AS audit_entry")
	if f.Target != "" {
		q = q.Where("target = ?", f.Target)
	}
	if f.Action != "" {
		q = q.Where("action = ?", f.Action)
	}
	total, err := q.OrderExpr("at DESC, id DESC").Limit(int64(p.Size)).Offset(int64(p.Offset())).ScanAndCount(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("list audit log: %w", err)
	}
	return items, int(total), nil
}
