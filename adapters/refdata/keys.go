package refdata

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"hearth/app/access"
	"hearth/app/apperr"
	"hearth/app/reference"
	"hearth/app/uuid"
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

// NewKey is what CreateKey returns: the key's id and its secret, which is
// shown once and never stored.
type NewKey struct {
	ID         string
	MerchantID string
	Secret     string
}

// CreateKey creates the merchant if it does not exist yet and a key for it.
// A worker key needs the id of one of the merchant's staff members.
func (s *Store) CreateKey(ctx context.Context, merchantName string, role access.Role, staffID string) (NewKey, error) {
	merchantName = strings.TrimSpace(merchantName)
	if merchantName == "" {
		return NewKey{}, errors.New("merchant name is required")
	}
	if _, ok := access.ParseRole(string(role)); !ok {
		return NewKey{}, fmt.Errorf("role %q: must be operator, worker or admin", role)
	}
	if (role == access.Worker) != (staffID != "") {
		return NewKey{}, errors.New("a worker key needs --staff, and only a worker key takes it")
	}
	if staffID != "" && !uuid.Valid(staffID) {
		return NewKey{}, fmt.Errorf("staff %q: must be a UUID", staffID)
	}
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	k := NewKey{ID: uuid.New(), Secret: keyPrefix + base64.RawURLEncoding.EncodeToString(raw[:])}
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		err := tx.QueryRowContext(ctx, `
			INSERT INTO merchants (id, name) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET name = excluded.name
			RETURNING id`, uuid.New(), merchantName).Scan(&k.MerchantID)
		if err != nil {
			return fmt.Errorf("merchant: %w", err)
		}
		if staffID != "" {
			var ok bool
			err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM staff WHERE id = ? AND merchant_id = ?)`,
				staffID, k.MerchantID).Scan(&ok)
			if err != nil {
				return fmt.Errorf("staff: %w", err)
			}
			if !ok {
				return fmt.Errorf("staff %s: no such staff member in merchant %q", staffID, merchantName)
			}
		}
		var staff any
		if staffID != "" {
			staff = staffID
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO api_keys (id, merchant_id, role, staff_id, key_hash) VALUES (?, ?, ?, ?, ?)`,
			k.ID, k.MerchantID, string(role), staff, hashKey(k.Secret))
		if err != nil {
			return fmt.Errorf("insert key: %w", err)
		}
		return nil
	})
	if err != nil {
		return NewKey{}, err
	}
	return k, nil
}

// Authenticate returns the principal of a key, or apperr.ErrNotFound when
// the key is unknown or revoked.
func (s *Store) Authenticate(ctx context.Context, secret string) (access.Principal, error) {
	if !strings.HasPrefix(secret, keyPrefix) || len(secret) > 100 {
		return access.Principal{}, apperr.ErrNotFound
	}
	var p access.Principal
	var role string
	var staff *string
	// $1: a fixed text, prepared once per connection (every request asks),
	// straight through pgx: the cheapest round trip there is.
	err := database.WithConn(ctx, s.db.DB, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `
			SELECT id, merchant_id, role, staff_id FROM api_keys
			WHERE key_hash = $1 AND revoked_at IS NULL`, hashKey(secret)).Scan(&p.KeyID, &p.MerchantID, &role, &staff)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return access.Principal{}, apperr.ErrNotFound
	}
	if err != nil {
		return access.Principal{}, fmt.Errorf("authenticate: %w", err)
	}
	p.Role = access.Role(role)
	if staff != nil {
		p.StaffID = *staff
	}
	return p, nil
}

// CreateStaff adds an active staff member to a merchant, for the demo set-up
// and tests; the API goes through command.Records.
func (s *Store) CreateStaff(ctx context.Context, merchantID, name string) (string, error) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	m := reference.StaffMember{ID: uuid.New(), MerchantID: merchantID, Name: name, Active: true, CreatedAt: now, UpdatedAt: now}
	if err := Staff(s.db).Insert(ctx, &m); err != nil {
		return "", err
	}
	return m.ID, nil
}
