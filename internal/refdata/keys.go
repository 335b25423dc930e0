package refdata

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"hearth/app/access"
	"hearth/app/ops"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/reference"
	"hearth/domain/uuid"
	"hearth/internal/database"
)

// keyPrefix starts every API key, so that a leaked key is easy to recognise
// (and to scan for).
const keyPrefix = "hk_"

// hashKey is how keys are stored: SHA-256 of the secret. Keys are 256
// random bits, so a fast hash is enough; there is nothing to brute-force.
func hashKey(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

func newSecret() string {
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	return keyPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
}

// NewKey is what CreateKey returns: the key and its secret, which is shown
// once and never stored.
type NewKey = access.NewKey

// CreateKey creates a key for set-ups and tests (the demo, benchmarks)
// through the use case (access.Keys), recorded in the audit log with actor
// "system". An operator or worker key creates its merchant when it does
// not exist; an admin key takes no merchant (""). A worker key needs the
// id of one of the merchant's active staff members.
func (s *Store) CreateKey(ctx context.Context, merchantName string, role access.Role, staffID string) (NewKey, error) {
	return s.CreateKeyAs(ctx, access.KeySpec{MerchantName: merchantName, Role: role, StaffID: staffID})
}

// CreateKeyAs is CreateKey for a key spec says (a name, an expiry).
func (s *Store) CreateKeyAs(ctx context.Context, spec access.KeySpec) (NewKey, error) {
	keys, err := access.NewKeys(s)
	if err != nil {
		return NewKey{}, err
	}
	return keys.IssueKey(ctx, spec, "system")
}

// InsertKey creates a key as spec (checked: access.KeySpec.Check) says and
// records the entry audit returns for it, in one transaction, which checks
// the request's key first (inTx), as RevokeKey's and RotateKey's do: an
// admin key revoked while an API instance caches it changes no key.
func (s *Store) InsertKey(ctx context.Context, spec access.KeySpec, audit func(access.Key) ops.AuditEntry) (NewKey, error) {
	id, secret := uuid.New(), newSecret()
	var k NewKey
	err := inTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
		merchantID, err := keyMerchant(ctx, tx, spec)
		if err != nil {
			return err
		}
		if spec.StaffID != "" {
			var active bool
			err := tx.QueryRowContext(ctx, `SELECT active FROM staff WHERE id = ? AND merchant_id = ?`, spec.StaffID, merchantID).Scan(&active)
			if errors.Is(err, sql.ErrNoRows) {
				return apperr.Invalid("staff_id", "no staff member %s in this merchant", spec.StaffID)
			}
			if err != nil {
				return fmt.Errorf("staff: %w", err)
			}
			if !active {
				return apperr.Invalid("staff_id", "staff member %s is inactive", spec.StaffID)
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO api_keys (id, merchant_id, role, staff_id, key_hash, name, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`,
			id, nullIfEmpty(merchantID), string(spec.Role), nullIfEmpty(spec.StaffID), hashKey(secret), spec.Name, spec.ExpiresAt)
		if err != nil {
			return fmt.Errorf("insert key: %w", err)
		}
		if k.Key, err = getKey(ctx, tx, id, false); err != nil {
			return err
		}
		return WriteAudit(ctx, tx, audit(k.Key))
	})
	if err != nil {
		return NewKey{}, err
	}
	k.Secret = secret
	return k, nil
}

// keyMerchant returns the id of the spec's merchant: the named one, created
// when missing, or the given one, which must exist; "" for admin keys.
func keyMerchant(ctx context.Context, tx bun.Tx, spec access.KeySpec) (string, error) {
	var id string
	switch {
	case spec.MerchantName != "":
		// A new merchant whose name differs from another's only in case,
		// spaces around it or its Unicode form (a decomposed accent,
		// fullwidth letters, a no-break space: NFKC) is a slip for that
		// one: it looks the same, the key would work for a new, empty
		// tenant, and nothing would say so.
		var like string
		err := tx.QueryRowContext(ctx, `SELECT name FROM merchants
			WHERE lower(btrim(normalize(name, NFKC))) = lower(btrim(normalize(?, NFKC))) AND name <> ?
			AND NOT EXISTS (SELECT 1 FROM merchants WHERE name = ?) ORDER BY name LIMIT 1`,
			spec.MerchantName, spec.MerchantName, spec.MerchantName).Scan(&like)
		if err == nil {
			return "", apperr.Invalid("merchant", "no merchant is named %q, but merchant %q exists: names are matched exactly, and a "+
				"name differing only in case or Unicode form would make a second merchant", spec.MerchantName, like)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return "", fmt.Errorf("merchant: %w", err)
		}
		err = tx.QueryRowContext(ctx, `
			INSERT INTO merchants (id, name) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET name = excluded.name
			RETURNING id`, uuid.New(), spec.MerchantName).Scan(&id)
		if err != nil {
			return "", fmt.Errorf("merchant: %w", err)
		}
	case spec.MerchantID != "":
		err := tx.QueryRowContext(ctx, `SELECT id FROM merchants WHERE id = ?`, spec.MerchantID).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return "", apperr.Invalid("merchant_id", "no merchant %s", spec.MerchantID)
		}
		if err != nil {
			return "", fmt.Errorf("merchant: %w", err)
		}
	}
	return id, nil
}

// RevokeKey revokes a key at once and records the entry audit returns for
// the key before and after, in one transaction. Revoking a revoked key
// changes nothing (and is recorded). An unknown id is apperr.ErrNotFound.
func (s *Store) RevokeKey(ctx context.Context, id string, audit func(before, after access.Key) ops.AuditEntry) (access.Key, error) {
	var k access.Key
	err := inTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
		if err := lockKey(ctx, tx, id); err != nil {
			return err
		}
		before, err := getKey(ctx, tx, id, true)
		if err != nil {
			return err
		}
		if before.RevokedAt == nil {
			if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = now() WHERE id = ?`, id); err != nil {
				return fmt.Errorf("revoke key: %w", err)
			}
		}
		// Its console sessions end with it (they would not pass their
		// lookup anyway): nothing of a revoked key stays.
		if err := endKeySessions(ctx, tx, id); err != nil {
			return err
		}
		if k, err = getKey(ctx, tx, id, false); err != nil {
			return err
		}
		return WriteAudit(ctx, tx, audit(before, k))
	})
	return k, err
}

// RotateKey replaces a key: a new key (new id, new secret) with the old
// one's merchant, role, staff member, name and expiry. With grace 0 the old
// key is revoked at once; otherwise it keeps working for grace (never
// beyond its own expiry). A revoked or expired key cannot be rotated
// (rules key.revoked, key.expired). One transaction, with the entry audit
// returns for the rotation.
func (s *Store) RotateKey(ctx context.Context, id string, grace time.Duration, audit func(access.Rotation) ops.AuditEntry) (access.Rotation, error) {
	newID, secret := uuid.New(), newSecret()
	var rot access.Rotation
	err := inTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
		if grace == 0 { // revoked at once: after the key's writes under way
			if err := lockKey(ctx, tx, id); err != nil {
				return err
			}
		}
		old, err := getKey(ctx, tx, id, true)
		if err != nil {
			return err
		}
		var expired bool
		var replacedBy sql.NullString
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(expires_at <= now(), false), replaced_by::text FROM api_keys WHERE id = ?`, id).
			Scan(&expired, &replacedBy); err != nil {
			return fmt.Errorf("rotate key: %w", err)
		}
		switch {
		case old.RevokedAt != nil && replacedBy.Valid:
			// Rotated already (without grace, or revoked since): a run again
			// after the answer was lost names the key it made, which works and
			// whose secret only that answer held.
			return &apperr.RuleError{Rule: "key.revoked", Detail: "key " + id + " is revoked: it was rotated into key " + replacedBy.String +
				"; if that rotation's secret was lost, revoke " + replacedBy.String + " and create a new key"}
		case old.RevokedAt != nil:
			return &apperr.RuleError{Rule: "key.revoked", Detail: "key " + id + " is revoked; create a new key instead"}
		case expired:
			return &apperr.RuleError{Rule: "key.expired", Detail: "key " + id + " has expired; create a new key instead"}
		case replacedBy.Valid:
			// Its expires_at is its grace's end now: a key made from it would
			// expire then.
			return &apperr.RuleError{Rule: "key.rotated", Detail: "key " + id + " was rotated into key " + replacedBy.String +
				" and works only until its grace period ends; rotate " + replacedBy.String + " instead"}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO api_keys (id, merchant_id, role, staff_id, key_hash, name, expires_at)
			SELECT ?, merchant_id, role, staff_id, ?, name, expires_at FROM api_keys WHERE id = ?`, newID, hashKey(secret), id); err != nil {
			return fmt.Errorf("insert rotated key: %w", err)
		}
		if grace == 0 {
			_, err = tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = now(), replaced_by = ? WHERE id = ?`, newID, id)
			if err == nil {
				err = endKeySessions(ctx, tx, id)
			}
		} else {
			// LEAST ignores NULL: a key without expiry gets now() + grace.
			_, err = tx.ExecContext(ctx, `UPDATE api_keys SET expires_at = LEAST(expires_at, now() + ?::interval), replaced_by = ? WHERE id = ?`,
				fmt.Sprintf("%d microseconds", grace.Microseconds()), newID, id)
		}
		if err != nil {
			return fmt.Errorf("retire rotated key: %w", err)
		}
		if rot.Key, err = getKey(ctx, tx, newID, false); err != nil {
			return err
		}
		if rot.Previous, err = getKey(ctx, tx, id, false); err != nil {
			return err
		}
		return WriteAudit(ctx, tx, audit(rot))
	})
	if err != nil {
		return access.Rotation{}, err
	}
	rot.Secret = secret
	return rot, nil
}

// ListKeys returns a page of keys, newest first: every key, or one
// merchant's. Never a secret or a hash.
func (s *Store) ListKeys(ctx context.Context, merchantID string, p query.Page) ([]access.Key, int, error) {
	keys := []access.Key{}
	q := selectKeys(s.db)
	if merchantID != "" {
		q = q.Where("k.merchant_id = ?", merchantID)
	}
	total, err := q.OrderExpr("k.created_at DESC, k.id DESC").Limit(int64(p.Size)).Offset(int64(p.Offset())).ScanAndCount(ctx, &keys)
	if err != nil {
		return nil, 0, fmt.Errorf("list keys: %w", err)
	}
	return keys, int(total), nil
}

// MerchantID returns the id of the merchant with that name, or
// apperr.ErrNotFound.
func (s *Store) MerchantID(ctx context.Context, name string) (string, error) {
	var id string
	err := s.db.QueryRowContext(ctx, `SELECT id FROM merchants WHERE name = ?`, strings.TrimSpace(name)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", apperr.ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("merchant %q: %w", name, err)
	}
	return id, nil
}

func selectKeys(db bun.IDB) *bun.SelectQuery {
	return db.NewSelect().TableExpr("api_keys AS k").
		ColumnExpr("k.id, k.merchant_id, m.name AS merchant_name, k.role, k.staff_id, k.name").
		ColumnExpr("k.created_at, k.last_used_at, k.expires_at, k.revoked_at").
		Join("LEFT JOIN merchants AS m ON m.id = k.merchant_id")
}

// getKey reads one key, locking its row when lock is set; an unknown id is
// apperr.ErrNotFound.
// lockKey takes the key's lock alone (lockKeySQL), waiting for its writes
// under way. An id that is not a UUID names no key: nothing to wait for
// (getKey then finds none).
func lockKey(ctx context.Context, tx bun.Tx, id string) error {
	if !uuid.Valid(id) {
		return nil
	}
	if _, err := tx.ExecContext(ctx, lockKeySQL, id); err != nil {
		return fmt.Errorf("lock key %s: %w", id, err)
	}
	return nil
}

func getKey(ctx context.Context, db bun.IDB, id string, lock bool) (access.Key, error) {
	var k access.Key
	q := selectKeys(db).Where("k.id = ?", id)
	if lock {
		q = q.For("UPDATE OF k")
	}
	err := q.Scan(ctx, &k)
	if errors.Is(err, sql.ErrNoRows) {
		return k, apperr.ErrNotFound
	}
	if err != nil {
		return k, fmt.Errorf("read key %s: %w", id, err)
	}
	return k, nil
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Authenticate returns the principal of a key, or apperr.ErrNotFound when
// the key is unknown, revoked or expired, or is a worker key whose staff
// member is inactive: the caller learns only that the key does not work.
func (s *Store) Authenticate(ctx context.Context, secret string) (access.Principal, error) {
	if !strings.HasPrefix(secret, keyPrefix) || len(secret) > 100 {
		return access.Principal{}, apperr.ErrNotFound
	}
	var p access.Principal
	var role string
	var merchant, staff *string
	var expires *time.Time
	// $1: a fixed text, prepared once per connection (every request asks),
	// straight through pgx: the cheapest round trip there is. The staff
	// join is by primary key.
	err := database.WithConn(ctx, s.db.DB, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `
			SELECT k.id, k.merchant_id, k.role, k.staff_id, k.expires_at
			FROM api_keys k LEFT JOIN staff s ON s.id = k.staff_id
			WHERE k.key_hash = $1 AND `+keyWorks, hashKey(secret)).Scan(&p.KeyID, &merchant, &role, &staff, &expires)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return access.Principal{}, apperr.ErrNotFound
	}
	if err != nil {
		return access.Principal{}, fmt.Errorf("authenticate: %w", err)
	}
	p.Role = access.Role(role)
	if merchant != nil {
		p.MerchantID = *merchant
	}
	if staff != nil {
		p.StaffID = *staff
	}
	if expires != nil {
		p.ExpiresAt = expires.UTC()
	}
	return p, nil
}

// KeyCheckSQL fails, dividing by zero, unless the key of hash $1 is the
// key $2 and still works: the check a write's transaction runs for the key
// it was started with (access.KeyCheck), right after KeyLockSQL.
const KeyCheckSQL = `SELECT 1 / count(*) FROM api_keys k LEFT JOIN staff s ON s.id = k.staff_id
	WHERE k.key_hash = $1 AND k.id = $2 AND ` + keyWorks

// KeyLockSQL takes the lock of key $1, shared, until the write commits
// (hearth_key_lock, migration eventstore/029): a revocation (lockKeySQL)
// waits for the writes that passed their check, and a check that comes
// after it waits, then reads the key revoked (a statement of its own,
// with a snapshot taken after the wait). Without the lock a write that
// checked its key just before the revocation committed after it had
// answered. Two prepared statements in the write's first batch cost less
// than one PL/pgSQL function doing both.
const KeyLockSQL = `SELECT pg_advisory_xact_lock_shared(hearth_key_lock($1))`

// lockKeySQL takes KeyCheckSQL's lock of key ? alone: a revocation's
// first statement, before it reads or updates the key's row.
const lockKeySQL = `SELECT pg_advisory_xact_lock(hearth_key_lock(?))`

// StaffKeysLockSQL takes the locks of the worker keys of staff member $2 of
// merchant $1 alone, in id order, as lockKeySQL takes one: a change that
// may stop the staff member working (made inactive, erased) runs it
// before it touches their row, so it waits for their keys' writes that
// passed their check (which reads the staff member active), and the writes
// after it wait, then find them inactive. Before the row: a write takes
// its key's lock first, then may read the row FOR SHARE.
const StaffKeysLockSQL = `SELECT count(pg_advisory_xact_lock(hearth_key_lock(id)))
	FROM (SELECT id FROM api_keys WHERE merchant_id = $1 AND staff_id = $2 ORDER BY id) k`

// KeyCheck returns the check, for a write's transaction, that secret is
// still the key of p and still works. A key's merchant, role and staff
// member never change, so its id stands for the rest of p.
func (s *Store) KeyCheck(p access.Principal, secret string) *access.KeyCheck {
	return &access.KeyCheck{LockSQL: KeyLockSQL, LockArgs: []any{p.KeyID}, SQL: KeyCheckSQL, Args: []any{hashKey(secret), p.KeyID}}
}

// CreateStaff adds an active staff member to a merchant, for the demo set-up
// and tests; the API goes through command.Records.
func (s *Store) CreateStaff(ctx context.Context, merchantID, name string) (string, error) {
	now := event.Instant(time.Now())
	m := reference.StaffMember{ID: uuid.New(), MerchantID: merchantID, Name: name, Active: true, CreatedAt: now, UpdatedAt: now}
	if err := Staff(s.db).Insert(ctx, &m); err != nil {
		return "", err
	}
	return m.ID, nil
}
