package database_test

import (
	"context"
	"database/sql"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"hearth/internal/database"
	"hearth/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// A query without arguments (every Bun query: Bun inlines its values) runs
// through the simple protocol and leaves no prepared statement behind; one
// with $n arguments is prepared once and reused.
func TestBareQueriesAreNotPrepared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := database.Open(ctx, pgtest.NewDB(t).EventStore, 1) // one connection: one session to look at
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	prepared := func() (n int) {
		require.NoError(t, db.DB.QueryRowContext(ctx, `SELECT count(*) FROM pg_prepared_statements`).Scan(&n))
		return n
	}
	require.Zero(t, prepared())

	var ids []string
	for range 3 {
		var id string
		require.NoError(t, db.NewSelect().ColumnExpr("gen_random_uuid()::text").Scan(ctx, &id))
		require.NoError(t, db.NewSelect().ColumnExpr("? || ''", id).Scan(ctx, &id)) // a new text each time
		ids = append(ids, id)
	}
	require.Len(t, ids, 3)
	require.Zero(t, prepared(), "Bun's queries are not prepared")

	for range 3 {
		var n int
		require.NoError(t, db.DB.QueryRowContext(ctx, `SELECT $1::int + 1`, 41).Scan(&n))
		require.Equal(t, 42, n)
	}
	require.Equal(t, 1, prepared(), "a $n statement is prepared once")
}

// WithBegin runs its statement inside the transaction it begins; when the
// statement fails, so does BeginTx, and the session goes back to the pool
// clean (a failed transaction left open would break its next user).
func TestWithBegin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := database.Open(ctx, pgtest.NewDB(t).EventStore, 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })

	tx, err := db.BeginTx(database.WithBegin(ctx, "SELECT set_config('hearth.test', 'set with begin', true)"), nil)
	require.NoError(t, err)
	var got string
	require.NoError(t, tx.QueryRowContext(ctx, `SELECT current_setting('hearth.test')`).Scan(&got))
	require.Equal(t, "set with begin", got)
	require.NoError(t, tx.Commit())
	require.NoError(t, db.QueryRowContext(ctx, `SELECT coalesce(current_setting('hearth.test', true), '')`).Scan(&got))
	require.Empty(t, got, "transaction-local")

	pid := func() (pid int) {
		require.NoError(t, db.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
		return pid
	}
	before := pid()
	_, err = db.BeginTx(database.WithBegin(ctx, "SELECT 1/0"), nil)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "22012", pgErr.Code)
	require.Equal(t, before, pid(), "the failed transaction was rolled back and the session kept")

	// Without WithBegin, BeginTx is pgx's own, with its options.
	tx, err = db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	require.NoError(t, err)
	require.NoError(t, tx.QueryRowContext(ctx, `SHOW transaction_isolation`).Scan(&got))
	require.Equal(t, "repeatable read", got)
	require.NoError(t, tx.Rollback())
}
