package webhooks

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"hearth/domain/apperr"
	"hearth/domain/webhook"
	"hearth/internal/keyring"
)

// Sealer seals the endpoints' signing secrets at rest: signing needs the
// secret itself, so it cannot be hashed as API keys are. internal/keyring's
// Ring (the master keys, MASTER_KEY) is one.
type Sealer interface {
	Seal(plaintext, aad []byte) ([]byte, error)
	Open(sealed, aad []byte) ([]byte, error)
	// Stale reports a value sealed by another key than the one sealing
	// now.
	Stale(sealed []byte) bool
}

// endpointColumns are an endpoint's columns as scanEndpoint reads them:
// each secret in clear (rows written before secrets were sealed) and
// sealed.
const endpointColumns = `id, merchant_id, url, to_json(event_types), description, enabled, disabled_reason,
	disabled_at, coalesce(secret, ''), secret_sealed, coalesce(previous_secret, ''), previous_secret_sealed,
	previous_secret_until, coalesce(older_secret, ''), older_secret_sealed, older_secret_until,
	version, created_at, updated_at`

// storedSecret is one secret column pair as read.
type storedSecret struct {
	plain  string
	sealed []byte
}

// open is the secret: the sealed form when there is one, else the plain
// one (a row not sealed yet), or "" (no secret in this slot).
func (s storedSecret) open(sealer Sealer, endpointID string) (string, error) {
	if s.sealed == nil {
		return s.plain, nil
	}
	plain, err := sealer.Open(s.sealed, []byte(endpointID))
	if err != nil {
		return "", fmt.Errorf("webhook endpoint %s: open its signing secret: %w", endpointID, err)
	}
	return string(plain), nil
}

// sealSecrets seals the endpoint's three secrets for storage; an empty slot
// is NULL.
func sealSecrets(sealer Sealer, e *webhook.Endpoint) (current, previous, older []byte, err error) {
	seal := func(secret string) ([]byte, error) {
		if secret == "" {
			return nil, nil
		}
		return sealer.Seal([]byte(secret), []byte(e.ID))
	}
	if current, err = seal(e.Secret); err != nil {
		return nil, nil, nil, err
	}
	if previous, err = seal(e.PreviousSecret); err != nil {
		return nil, nil, nil, err
	}
	if older, err = seal(e.OlderSecret); err != nil {
		return nil, nil, nil, err
	}
	return current, previous, older, nil
}

// writeSecretsSQL stores an endpoint's sealed secrets ($2, $3, $4) and
// clears the plain ones.
const writeSecretsSQL = `UPDATE webhook_endpoints SET secret = NULL, previous_secret = NULL, older_secret = NULL,
	secret_sealed = $2, previous_secret_sealed = $3, older_secret_sealed = $4 WHERE id = $1`

// SealSecrets brings the endpoints' secrets under the sealer: every secret
// still in clear is sealed and its plain copy cleared; with all, every
// sealed secret whose key is no longer the one sealing (Stale) is sealed
// again under it too (`app keyring rewrap`, after a new master key). It
// works through the endpoints a page at a time, each row locked while it
// is rewritten, so that running it twice, or on two instances at once, is
// harmless. It returns how many endpoints it rewrote.
func (s *Store) SealSecrets(ctx context.Context, all bool) (int, error) {
	page := `SELECT id FROM webhook_endpoints WHERE id > $1
		AND (secret IS NOT NULL OR previous_secret IS NOT NULL OR older_secret IS NOT NULL) ORDER BY id LIMIT 100`
	if all {
		page = `SELECT id FROM webhook_endpoints WHERE id > $1 ORDER BY id LIMIT 100`
	}
	rewritten, after := 0, "00000000-0000-0000-0000-000000000000"
	for {
		ids, err := s.ids(ctx, page, after)
		if err != nil || len(ids) == 0 {
			return rewritten, err
		}
		for _, id := range ids {
			done, err := s.sealOne(ctx, id)
			if err != nil {
				return rewritten, err
			}
			if done {
				rewritten++
			}
		}
		after = ids[len(ids)-1]
	}
}

// StillSealed counts the endpoints' secrets sealed by another master key
// than the one sealing now, per master key id: after SealSecrets(all), those
// an instance still sealing with an older key wrote meanwhile.
func (s *Store) StillSealed(ctx context.Context) (map[string]int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT v FROM webhook_endpoints,
		unnest(ARRAY[secret_sealed, previous_secret_sealed, older_secret_sealed]) AS v WHERE v IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("count webhook secrets by master key: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var sealed []byte
		if err := rows.Scan(&sealed); err != nil {
			return nil, err
		}
		if id, err := keyring.KeyID(sealed); err == nil && s.secrets.Stale(sealed) {
			out[id]++
		}
	}
	return out, rows.Err()
}

func (s *Store) ids(ctx context.Context, query, after string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, query, after)
	if err != nil {
		return nil, fmt.Errorf("list webhook endpoints to seal: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// sealOne rewrites one endpoint's secrets sealed under the current key, if
// any is in clear or stale; it reports whether it did.
func (s *Store) sealOne(ctx context.Context, id string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	done := false
	err := inTx(ctx, s.db, func(tx *sql.Tx) (any, error) {
		e, slots, err := scanEndpointSlots(tx.QueryRowContext(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints
			WHERE id = $1 FOR UPDATE`, id), s.secrets)
		if errors.Is(err, apperr.ErrNotFound) {
			return nil, nil // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		needed := false
		for _, slot := range slots {
			needed = needed || slot.plain != "" || slot.sealed != nil && s.secrets.Stale(slot.sealed)
		}
		if !needed {
			return nil, nil
		}
		current, previous, older, err := sealSecrets(s.secrets, &e)
		if err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, writeSecretsSQL, id, current, previous, older); err != nil {
			return nil, fmt.Errorf("seal webhook endpoint %s's secrets: %w", id, err)
		}
		done = true
		return nil, nil
	})
	return done, err
}
