package refdata

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/uptrace/bun"

	"hearth/app/ops"
	"hearth/domain/event"
)

// staffKeysSQL reads a staff member's worker keys, oldest first: never a
// secret or a hash.
const staffKeysSQL = `
	SELECT id, role, name, created_at, last_used_at, expires_at, revoked_at
	FROM api_keys WHERE merchant_id = $1 AND staff_id = $2
	ORDER BY created_at, id LIMIT $3`

// StaffHistory implements ops.StaffExportStore: the staff member's record,
// working hours and worker keys in one REPEATABLE READ snapshot of the
// event store, and the audit entry of the export in that same transaction
// (the export and its record commit together).
func (s *Store) StaffHistory(ctx context.Context, merchantID, staffID string, limit int,
	audit func(ops.StaffHistory) ops.AuditEntry) (ops.StaffHistory, error) {
	var out ops.StaffHistory
	err := s.db.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead}, func(ctx context.Context, tx bun.Tx) error {
		m, err := Staff(s.db).get(ctx, tx, merchantID, staffID, false)
		if err != nil {
			return err
		}
		h := ops.StaffHistory{StaffMember: m, Keys: []ops.ExportedKey{}}
		if err := tx.QueryRowContext(ctx, `SELECT now()`).Scan(&h.At); err != nil {
			return fmt.Errorf("read the transaction's time: %w", err)
		}
		h.At = event.Instant(h.At)
		if h.WorkingHours, err = scanStaffHours(tx.Tx.QueryRowContext(ctx, staffHoursSQL+` AND s.id = $2`, merchantID, staffID)); err != nil {
			return fmt.Errorf("read the staff member's working hours: %w", err)
		}
		rows, err := tx.Tx.QueryContext(ctx, staffKeysSQL, merchantID, staffID, limit+1)
		if err != nil {
			return fmt.Errorf("read the staff member's keys: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var k ops.ExportedKey
			if err := rows.Scan(&k.ID, &k.Role, &k.Name, &k.CreatedAt, &k.LastUsedAt, &k.ExpiresAt, &k.RevokedAt); err != nil {
				return fmt.Errorf("read the staff member's keys: %w", err)
			}
			h.Keys = append(h.Keys, k)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read the staff member's keys: %w", err)
		}
		if len(h.Keys) > limit {
			return ops.StaffTooLarge("keys", limit)
		}
		if err := WriteAudit(ctx, tx, audit(h)); err != nil {
			return err
		}
		out = h
		return nil
	})
	return out, err
}
