package refdata

import (
	"context"
	"database/sql"

	"github.com/uptrace/bun"

	"hearth/app/access"
	"hearth/app/command"
)

// The one place the reference records' writes open their transactions
// (customers, staff, catalog items, working hours), so that each checks
// the request's key there as the event store's do (access.KeyCheck): the
// API server vouches for a key from its cache for up to KEY_CACHE_TTL, and
// only a check inside the write's transaction, before anything it writes,
// keeps a key revoked before the write began from writing.

// needsTx reports whether a write must run in a transaction of its own
// rather than as one statement: its idempotent answer is stored with it,
// or its key is checked first.
func needsTx(ctx context.Context) bool {
	return command.IdempotentOf(ctx) != nil || access.PendingKeyCheck(ctx) != nil
}

// inTx runs fn in a transaction of db whose first statement is the
// request's key check, when ctx carries one not run yet: a key that no
// longer works is access.ErrKeyRefused, and nothing is written.
func inTx(ctx context.Context, db *bun.DB, fn func(ctx context.Context, tx bun.Tx) error) error {
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if err := checkKey(ctx, tx.Tx); err != nil {
			return err
		}
		return fn(ctx, tx)
	})
}

// checkKey runs the key check ctx carries, if it has not run yet, and
// records its outcome (access.KeyCheck.Settle). It goes on the raw
// transaction: the check's text has $n parameters, which Bun's formatter
// would not leave alone.
func checkKey(ctx context.Context, tx *sql.Tx) error {
	check := access.PendingKeyCheck(ctx)
	if check == nil {
		return nil
	}
	return check.Run(func(q string, args ...any) error { _, err := tx.ExecContext(ctx, q, args...); return err })
}
