// Package idempotency keeps the Idempotency-Key records of writes in the
// event-store database (table idempotency_keys, migrations eventstore/005
// and 010). A record belongs to a merchant and a scope (the principal that
// sent the key: its role, and a worker's staff member), so one principal's
// key never answers another's request. Records from before 010 have the
// scope "" (legacy): they answer any principal of their merchant, as they
// did, until they are pruned, and no new record of their key is made.
//
// A record goes through two states. Claimed: one attempt holds it (a random
// token and a lease); no answer yet. Answered: the write's answer (status,
// headers, body), stored by hearth_idempotency_complete in the transaction
// of the write itself, which checks that the token is still the holder's. An
// attempt whose lease expired (its process died) can be taken over by a
// retry; the old attempt's write then fails at its commit, so a key never
// writes twice.
//
// An erasure deletes the answers that name its subject and keeps their keys
// in idempotency_forgotten (migration eventstore/030) until they are pruned
// like the answers: such a key is answered, and a retry with it, whatever
// its request, is told the answer is gone (Get: Forgotten) and runs
// nothing; a retry that ran anyway (its claim raced the erasure) fails at
// its completion, as a taken-over attempt does.
package idempotency

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"hearth/app/command"
	"hearth/domain/apperr"
	"hearth/domain/uuid"
)

// CompleteSQL stores an attempt's answer in the caller's transaction; its
// arguments are CompleteArgs. It fails with SQLSTATE HI001 (see TakenOver)
// when the attempt no longer holds the key, or when an erasure forgot the
// key meanwhile.
const CompleteSQL = `SELECT hearth_idempotency_answer($1, $2, $3, $4, $5, $6)`

// CompleteArgs are CompleteSQL's arguments for attempt i and its answer.
// What is stored is the answer's replayable part (Answer.Replayed).
func CompleteArgs(i *command.Idempotent, a command.Answer) ([]any, error) {
	a = a.Replayed()
	header, err := json.Marshal(a.Header)
	if err != nil {
		return nil, fmt.Errorf("idempotent answer headers: %w", err)
	}
	return []any{i.MerchantID, i.Key, i.Token, a.Status, string(header), a.Body}, nil
}

// TakenOver maps the failure of CompleteSQL to command.ErrKeyTakenOver;
// other errors pass through.
func TakenOver(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "HI001" {
		return fmt.Errorf("%w: %s", command.ErrKeyTakenOver, pgErr.Message)
	}
	return err
}

// Seal renders the answer of attempt i from result (what the write wrote,
// as the port's Render takes it) and stores it in the write's transaction
// tx; the write and its answer then commit together or not at all.
func Seal(ctx context.Context, tx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}, i *command.Idempotent, result any) error {
	a, err := i.Render(ctx, result)
	if err != nil {
		return fmt.Errorf("render idempotent answer: %w", err)
	}
	args, err := CompleteArgs(i, a)
	if err != nil {
		return err
	}
	// $n text on the raw transaction: Bun formats only its own ? marks.
	if _, err := tx.ExecContext(ctx, CompleteSQL, args...); err != nil {
		return TakenOver(err)
	}
	i.Sealed(a) // should the commit fail, the write fails: the port goes by the error
	return nil
}

// Store keeps the records.
type Store struct {
	db *sql.DB
}

// New returns a store on the event-store database.
func New(db *sql.DB) (*Store, error) {
	if db == nil {
		return nil, errors.New("idempotency.New: nil db")
	}
	return &Store{db: db}, nil
}

// Claim makes the attempt the holder of the key in the merchant's scope for
// lease: a new record, or one whose holder's lease has expired without an
// answer (and whose fingerprint is the same). It returns the new token, or
// "" when another attempt holds the key or has answered it, or when the key
// has a legacy record or was forgotten by an erasure (Get tells which).
func (s *Store) Claim(ctx context.Context, merchantID, scope, key string, fingerprint []byte, lease time.Duration) (string, error) {
	if scope == "" {
		return "", errors.New("claim idempotency key: no scope")
	}
	token := uuid.New()
	// $n text: prepared once per connection; cast, since INSERT ... SELECT
	// does not type its parameters from the columns. A conflicting row that
	// another transaction is inserting or answering makes this wait for it,
	// then decide on what it committed. A take-over starts the record's
	// life again (created_at, which Prune goes by): the dead attempt left
	// no answer, and the one the retry stores is kept IDEMPOTENCY_KEEP like
	// any; aged from the dead attempt, it would be pruned at once (and the
	// retry's claim while it runs), and a later retry would write again.
	var got string
	err := s.db.QueryRowContext(ctx, `
		INSERT INTO idempotency_keys (merchant_id, scope, key, fingerprint, token, locked_until)
		SELECT $1::uuid, $2::text, $3::text, $4::bytea, $5::uuid, now() + $6::bigint * interval '1 millisecond'
		 WHERE NOT EXISTS (SELECT 1 FROM idempotency_keys WHERE merchant_id = $1::uuid AND scope = '' AND key = $3::text)
		   AND NOT EXISTS (SELECT 1 FROM idempotency_forgotten WHERE merchant_id = $1::uuid AND scope IN ($2::text, '') AND key = $3::text)
		ON CONFLICT (merchant_id, scope, key) DO UPDATE
		   SET token = excluded.token, locked_until = excluded.locked_until, created_at = now()
		 WHERE idempotency_keys.status IS NULL
		   AND idempotency_keys.locked_until < now()
		   AND idempotency_keys.fingerprint = excluded.fingerprint
		RETURNING token`, merchantID, scope, key, fingerprint, token, lease.Milliseconds()).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("claim idempotency key: %w", err)
	}
	return got, nil
}

// Get reads the key in the merchant's scope, or its legacy record, or the
// key an erasure forgot (which goes first: a record of the key beside it
// is a claim that raced the erasure, whose write cannot complete);
// apperr.ErrNotFound when there is none (or its holder released it).
func (s *Store) Get(ctx context.Context, merchantID, scope, key string) (command.IdempotencyRecord, error) {
	var rec command.IdempotencyRecord
	var status sql.NullInt32
	var lockedUntil sql.NullTime
	var location sql.NullString
	var header []byte
	var body []byte
	err := s.db.QueryRowContext(ctx, `
		SELECT false, scope = '', fingerprint, locked_until, status, header, body, NULL FROM idempotency_keys
		WHERE merchant_id = $1 AND scope IN ($2, '') AND key = $3
		UNION ALL
		SELECT true, scope = '', NULL, NULL, NULL, NULL, NULL, location FROM idempotency_forgotten
		WHERE merchant_id = $1 AND scope IN ($2, '') AND key = $3
		ORDER BY 1 DESC, 2 DESC LIMIT 1`, merchantID, scope, key).Scan(
		&rec.Forgotten, &rec.Legacy, &rec.Fingerprint, &lockedUntil, &status, &header, &body, &location)
	if errors.Is(err, sql.ErrNoRows) {
		return command.IdempotencyRecord{}, apperr.ErrNotFound
	}
	if err != nil {
		return command.IdempotencyRecord{}, fmt.Errorf("read idempotency key: %w", err)
	}
	rec.LockedUntil, rec.Location = lockedUntil.Time, location.String
	if status.Valid {
		a := command.Answer{Status: int(status.Int32), Body: body}
		if err := json.Unmarshal(header, &a.Header); err != nil {
			return command.IdempotencyRecord{}, fmt.Errorf("idempotency key %q: stored headers: %w", key, err)
		}
		rec.Answer = &a
	}
	return rec, nil
}

// Complete stores the answer of an attempt that wrote nothing (a refused
// write), on its own; command.ErrKeyTakenOver when the attempt no longer
// holds the key.
func (s *Store) Complete(ctx context.Context, i *command.Idempotent, a command.Answer) error {
	args, err := CompleteArgs(i, a)
	if err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, CompleteSQL, args...); err != nil {
		return fmt.Errorf("store idempotent answer: %w", TakenOver(err))
	}
	return nil
}

// Release gives up an attempt's claim without an answer (a failure the
// client may retry), so the next attempt with the key runs the write.
func (s *Store) Release(ctx context.Context, i *command.Idempotent) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE merchant_id = $1 AND key = $2 AND token = $3 AND status IS NULL`,
		i.MerchantID, i.Key, i.Token)
	if err != nil {
		return fmt.Errorf("release idempotency key: %w", err)
	}
	return nil
}

// Prune deletes up to batch records created more than keep ago, oldest
// first, and as many forgotten keys, and returns the larger of the two
// counts (a full batch of either: there may be more). Rows another
// transaction holds are skipped, not waited for.
func (s *Store) Prune(ctx context.Context, keep time.Duration, batch int) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `
		WITH records AS (
			DELETE FROM idempotency_keys WHERE ctid = ANY (ARRAY(
				SELECT ctid FROM idempotency_keys
				WHERE created_at < now() - $1 * interval '1 millisecond'
				ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED))
			RETURNING 1),
		forgotten AS (
			DELETE FROM idempotency_forgotten WHERE ctid = ANY (ARRAY(
				SELECT ctid FROM idempotency_forgotten
				WHERE created_at < now() - $1 * interval '1 millisecond'
				ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED))
			RETURNING 1)
		SELECT greatest((SELECT count(*) FROM records), (SELECT count(*) FROM forgotten))`, keep.Milliseconds(), batch).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("prune idempotency keys: %w", err)
	}
	return n, nil
}

// Announce records that an instance keeps records for keep
// (IDEMPOTENCY_KEEP) and returns, shortest first, every keep in force: its
// own and those announced within their own length of now, whose instances
// may still run (or answered records that are kept that long). Instances
// deployed from different manifests may disagree on the setting, and each
// prunes the one table: pruning goes by the longest, so that a retry
// through any instance finds what the instance that answered it promised
// to keep. A keep nobody announced within its length is deleted.
func (s *Store) Announce(ctx context.Context, keep time.Duration) ([]time.Duration, error) {
	// The DELETE leaves this keep's row alone: one statement may not both
	// upsert and delete a row.
	rows, err := s.db.QueryContext(ctx, `
		WITH seen AS (
			INSERT INTO idempotency_keeps (keep_ms, seen_at) VALUES ($1, now())
			ON CONFLICT (keep_ms) DO UPDATE SET seen_at = excluded.seen_at),
		gone AS (
			DELETE FROM idempotency_keeps
			WHERE keep_ms <> $1 AND seen_at < now() - keep_ms * interval '1 millisecond')
		SELECT keep_ms FROM idempotency_keeps
		WHERE keep_ms <> $1 AND seen_at >= now() - keep_ms * interval '1 millisecond'
		UNION SELECT $1::bigint ORDER BY 1`, keep.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("announce idempotency keep: %w", err)
	}
	defer rows.Close()
	var keeps []time.Duration
	for rows.Next() {
		var ms int64
		if err := rows.Scan(&ms); err != nil {
			return nil, fmt.Errorf("announce idempotency keep: %w", err)
		}
		keeps = append(keeps, time.Duration(ms)*time.Millisecond)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("announce idempotency keep: %w", err)
	}
	return keeps, nil
}

// PruneLoop prunes every interval until ctx ends, in batches of batch rows
// until a batch comes back short, records older than the longest keep in
// force (Announce; keep is this instance's). Errors are logged through
// onError and the loop goes on; a round whose announcement failed prunes
// nothing, since it does not know what the other instances keep.
func (s *Store) PruneLoop(ctx context.Context, keep, interval time.Duration, batch int, onError func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		keeps, err := s.Announce(callCtx, keep)
		cancel()
		if err != nil && ctx.Err() == nil {
			onError(err)
		}
		for err == nil {
			callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			var n int
			n, err = s.Prune(callCtx, keeps[len(keeps)-1], batch)
			cancel()
			if err != nil && ctx.Err() == nil {
				onError(err)
			}
			if n < batch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
