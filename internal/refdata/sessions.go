package refdata

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"hearth/app/access"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/internal/database"
)

// The web console's sessions (console_sessions, migration 009), beside
// the keys they stand for, so that every API instance sees them. A row
// holds the SHA-256 of the cookie's token and the key's id: neither the
// token nor the key's secret.

// sessionTouchEvery is how stale a session's last use may be before a
// lookup writes it: a console page costs a write at most once a minute
// per session, and a session lives up to that much less than its idle
// time.
const sessionTouchEvery = time.Minute

// sessionPruneBatch is how many expired sessions a sign-in deletes at most,
// so that pruning is bounded work; each sign-in prunes more than it adds.
const sessionPruneBatch = 100

// keyWorks is the condition on api_keys k (and its staff member s) under
// which a key authenticates, as in Authenticate. KeyCheckSQL and SessionCheckSQL, the writes' checks, use it too.
const keyWorks = `k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now()) AND (k.staff_id IS NULL OR s.active)`

// OpenSession opens a session for a key that still works, closes the key's
// least recently used sessions past n.PerKey, and prunes a batch of
// expired sessions, in one transaction. A key that no longer works
// (revoked meanwhile) is apperr.ErrNotFound.
func (s *Store) OpenSession(ctx context.Context, n access.NewSession) error {
	if len(n.TokenHash) != 32 || n.PerKey < 1 || n.Idle <= 0 || n.Lifetime <= 0 {
		return errors.New("open session: a 32-byte token hash, a cap and both durations are required")
	}
	at := event.Instant(n.At)
	ends := at.Add(n.Lifetime)
	expires := at.Add(n.Idle)
	if expires.After(ends) {
		expires = ends
	}
	return s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		// The key's lock, shared, as a write of the key takes it: a change
		// that stops a staff member working takes their keys' locks alone
		// before it touches their row and ends their sessions
		// (StaffKeysLockSQL, staffSessionsEndSQL), so it waits for this
		// sign-in and ends its session too, or comes first and this
		// sign-in reads the staff member inactive. Without it a sign-in
		// that read them active wrote its session after the change had
		// deleted the others, and it came back with the staff member.
		if _, err := tx.Tx.ExecContext(ctx, KeyLockSQL, n.KeyID); err != nil {
			return fmt.Errorf("lock session key: %w", err)
		}
		// The key's row, locked: sign-ins of one key take turns, so that
		// the cap holds, and a revocation (which updates this row, then
		// ends the key's sessions) comes wholly before or after this one.
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM api_keys k LEFT JOIN staff s ON s.id = k.staff_id
			WHERE k.id = ? AND `+keyWorks+` FOR NO KEY UPDATE OF k`, n.KeyID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return apperr.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("lock session key: %w", err)
		}
		// Values inlined by Bun, no arguments: the three statements go in
		// one round trip.
		_, err = tx.ExecContext(ctx, `
			INSERT INTO console_sessions (token_hash, key_id, time_zone, created_at, last_seen_at, ends_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?);
			DELETE FROM console_sessions WHERE token_hash IN (
				SELECT token_hash FROM console_sessions WHERE key_id = ?
				ORDER BY last_seen_at DESC, created_at DESC OFFSET ?);
			DELETE FROM console_sessions WHERE token_hash IN (
				SELECT token_hash FROM console_sessions WHERE expires_at <= ?
				ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED)`,
			n.TokenHash, n.KeyID, n.TimeZone, at, at, ends, expires,
			n.KeyID, n.PerKey,
			at, sessionPruneBatch)
		if err != nil {
			return fmt.Errorf("open session: %w", err)
		}
		return nil
	})
}

// Session returns the session of u.TokenHash if it has not expired and its
// key still works (not revoked or expired, its staff member active), with
// the key's principal now; otherwise apperr.ErrNotFound. It notes the use
// (the session's idle time starts again), writing it at most every
// sessionTouchEvery.
func (s *Store) Session(ctx context.Context, u access.SessionUse) (access.Session, error) {
	at := event.Instant(u.At)
	var out access.Session
	var role string
	var merchant, staff *string
	// $n: a fixed text, prepared once per connection (every console
	// request asks), straight through pgx like Authenticate. The update
	// sees the row as found; the select returns it as it was.
	err := database.WithConn(ctx, s.db.DB, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `
			WITH found AS (
				SELECT cs.token_hash, cs.last_seen_at, cs.time_zone, cs.flash, k.id, k.merchant_id, k.role, k.staff_id
				FROM console_sessions cs
				JOIN api_keys k ON k.id = cs.key_id
				LEFT JOIN staff s ON s.id = k.staff_id
				WHERE cs.token_hash = $1 AND cs.expires_at > $2 AND `+keyWorks+`
			), touched AS (
				UPDATE console_sessions cs SET last_seen_at = $2, expires_at = least($3, cs.ends_at)
				FROM found f WHERE cs.token_hash = f.token_hash AND f.last_seen_at <= $4 AND NOT $5
			)
			SELECT id, merchant_id, role, staff_id, time_zone, flash FROM found`,
			u.TokenHash, at, at.Add(u.Idle), at.Add(-sessionTouchEvery), u.Poll).
			Scan(&out.Principal.KeyID, &merchant, &role, &staff, &out.TimeZone, &out.Flash)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return access.Session{}, apperr.ErrNotFound
	}
	if err != nil {
		return access.Session{}, fmt.Errorf("look up session: %w", err)
	}
	out.Principal.Role = access.Role(role)
	if merchant != nil {
		out.Principal.MerchantID = *merchant
	}
	if staff != nil {
		out.Principal.StaffID = *staff
	}
	return out, nil
}

// SessionCheckSQL fails, dividing by zero, unless the session of token
// hash $1 is open at $3 and its key, $2, still works: the check a console
// write's transaction runs (access.KeyCheck), in place of KeyCheckSQL,
// as the console holds no key's secret. Revoking a key deletes its
// sessions, but an expired key's (or one rotated past its grace) stay
// until pruned: keyWorks decides. KeyLockSQL runs first, as before
// KeyCheckSQL, so a revocation waits for the console writes past their
// check.
const SessionCheckSQL = `SELECT 1 / count(*) FROM console_sessions cs
	JOIN api_keys k ON k.id = cs.key_id LEFT JOIN staff s ON s.id = k.staff_id
	WHERE cs.token_hash = $1 AND k.id = $2 AND cs.expires_at > $3 AND ` + keyWorks

// SessionCheck returns the check, for a console write's transaction, that
// the session of tokenHash is still open at at and its key, keyID, still
// works.
func (s *Store) SessionCheck(tokenHash []byte, keyID string, at time.Time) *access.KeyCheck {
	return &access.KeyCheck{LockSQL: KeyLockSQL, LockArgs: []any{keyID}, SQL: SessionCheckSQL, Args: []any{tokenHash, keyID, event.Instant(at)}}
}

// SetSessionFlash sets the message the session's next page shows (empty:
// none).
func (s *Store) SetSessionFlash(ctx context.Context, tokenHash []byte, flash string) error {
	if _, err := s.db.DB.ExecContext(ctx, `UPDATE console_sessions SET flash = $1 WHERE token_hash = $2`, flash, tokenHash); err != nil {
		return fmt.Errorf("set session flash: %w", err)
	}
	return nil
}

// CloseSession ends a session (sign-out). An unknown one is already ended.
func (s *Store) CloseSession(ctx context.Context, tokenHash []byte) error {
	if _, err := s.db.DB.ExecContext(ctx, `DELETE FROM console_sessions WHERE token_hash = $1`, tokenHash); err != nil {
		return fmt.Errorf("close session: %w", err)
	}
	return nil
}

// staffSessionsEndSQL ends the console sessions of the worker keys of
// staff member $2 of merchant $1 when the staff member is inactive, in the
// transaction that updates their row, after the update: a deactivation
// ends them as a revocation does. Left to the lookup, which refuses them
// only while the staff member is inactive, they came back when the staff
// member was made active again, signing in a browser that still held the
// cookie (a phone switched off meanwhile, or handed on) without the key.
const staffSessionsEndSQL = `DELETE FROM console_sessions WHERE key_id IN (
	SELECT k.id FROM api_keys k JOIN staff s ON s.id = k.staff_id
	WHERE k.merchant_id = $1 AND k.staff_id = $2 AND NOT s.active)`

// endKeySessions ends a key's console sessions, in the transaction that
// revokes it.
func endKeySessions(ctx context.Context, tx bun.Tx, keyID string) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM console_sessions WHERE key_id = ?`, keyID); err != nil {
		return fmt.Errorf("end key's sessions: %w", err)
	}
	return nil
}
