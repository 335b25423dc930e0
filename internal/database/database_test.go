package database_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"hearth/domain/uuid"
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

	// Without WithBegin (or with it taken off again), BeginTx is pgx's
	// own, with its options.
	tx, err = db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	_, err = db.BeginTx(database.WithBegin(ctx, "SELECT 1"), &sql.TxOptions{ReadOnly: true})
	require.ErrorContains(t, err, "default transactions only")
	tx, err = db.BeginTx(database.WithoutBegin(database.WithBegin(ctx, "SELECT 1/0")), &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	require.NoError(t, err)
	require.NoError(t, tx.QueryRowContext(ctx, `SHOW transaction_isolation`).Scan(&got))
	require.Equal(t, "repeatable read", got)
	require.NoError(t, tx.Rollback())
}

// A transaction begun under Autocommit is none: each of its statements
// commits on its own (Rollback undoes nothing), whatever options it was
// begun with, and the session never waits idle in a transaction.
func TestAutocommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := database.Open(ctx, pgtest.NewDB(t).EventStore, 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	_, err = db.ExecContext(ctx, `CREATE TABLE autocommitted (n int)`)
	require.NoError(t, err)

	tx, err := db.BeginTx(database.Autocommit(ctx), &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	require.NoError(t, err)
	xact := func() (id string) {
		require.NoError(t, tx.QueryRowContext(ctx, `SELECT pg_current_xact_id()::text`).Scan(&id))
		return id
	}
	require.NotEqual(t, xact(), xact(), "each statement is a transaction of its own")
	var state string
	require.NoError(t, tx.QueryRowContext(ctx, `SELECT current_setting('transaction_isolation')`).Scan(&state))
	require.Equal(t, "read committed", state, "no repeatable-read snapshot is kept")
	_, err = tx.ExecContext(ctx, `INSERT INTO autocommitted VALUES (1)`)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	var n int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM autocommitted`).Scan(&n))
	require.Equal(t, 1, n, "committed with its statement")

	tx, err = db.BeginTx(database.Autocommit(ctx), nil)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
}

// A statement run under WithCommit in a transaction begun with WithBegin
// commits the transaction with it (one round trip); Commit then sends
// nothing. When the statement fails, nothing is committed and the
// transaction awaits its Rollback, as after any failed statement; when
// COMMIT fails (here a deferred constraint), the statement returns its
// error and nothing is kept. The session is usable afterwards, each time.
func TestWithCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDB(t).EventStore
	db, err := database.Open(ctx, url, 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	other, err := database.Open(ctx, url, 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	_, err = db.ExecContext(ctx, `CREATE TABLE committed (n int PRIMARY KEY,
		parent int REFERENCES committed DEFERRABLE INITIALLY DEFERRED)`)
	require.NoError(t, err)
	count := func() (n int) {
		require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM committed`).Scan(&n))
		return n
	}
	begin := func() *sql.Tx {
		tx, err := db.DB.BeginTx(database.WithBegin(ctx, "SELECT set_config('hearth.test', 'x', true)"), nil)
		require.NoError(t, err)
		return tx
	}

	tx := begin()
	res, err := tx.ExecContext(database.WithCommit(ctx), `INSERT INTO committed (n) SELECT g FROM generate_series(1, $1::int) g`, 2)
	require.NoError(t, err)
	affected, err := res.RowsAffected()
	require.NoError(t, err)
	require.EqualValues(t, 2, affected)
	var seen int
	require.NoError(t, other.QueryRowContext(ctx, `SELECT count(*) FROM committed`).Scan(&seen))
	require.Equal(t, 2, seen, "committed with the statement, before Commit")
	require.NoError(t, tx.Commit())
	require.Equal(t, 2, count(), "committed with the statement")

	tx = begin()
	_, err = tx.ExecContext(database.WithCommit(ctx), `INSERT INTO committed (n) VALUES (1)`) // a duplicate
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23505", pgErr.Code)
	require.NoError(t, tx.Rollback())
	require.Equal(t, 2, count())

	tx = begin()
	_, err = tx.ExecContext(database.WithCommit(ctx), `INSERT INTO committed (n, parent) VALUES (3, 99)`) // fails at COMMIT
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23503", pgErr.Code)
	require.Error(t, tx.Commit(), "a transaction whose COMMIT failed does not report a commit")
	require.Equal(t, 2, count(), "nothing of the failed commit kept")

	tx = begin()
	_, err = tx.ExecContext(ctx, `INSERT INTO committed (n) VALUES (4)`)
	require.NoError(t, err)
	_, err = tx.ExecContext(database.WithCommit(ctx), `INSERT INTO committed (n) VALUES (5)`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	require.Equal(t, 4, count(), "every statement of the transaction committed")

	// Outside a transaction begun with WithBegin it is a plain statement,
	// committed by the transaction's Commit.
	tx, err = db.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(database.WithCommit(ctx), `INSERT INTO committed (n) VALUES (6)`)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	require.Equal(t, 4, count(), "rolled back")
}

// WithConn lends a pool connection to pgx: a batch can carry BEGIN and a
// statement in one round trip. A transaction left open (fn failed half-way)
// is rolled back and the session kept; a pool not opened by package
// database is refused.
func TestWithConn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDB(t).EventStore
	db, err := database.Open(ctx, url, 1) // one connection: every call gets the same session
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	pid := func() (pid int) {
		require.NoError(t, db.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
		return pid
	}
	before := pid()

	var setting string
	err = database.WithConn(ctx, db.DB, func(conn *pgx.Conn) error {
		b := &pgx.Batch{}
		b.Queue(`BEGIN`)
		b.Queue(`SELECT set_config('hearth.test', 'in the transaction', true)`).QueryRow(func(row pgx.Row) error { return row.Scan(&setting) })
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, `COMMIT`)
		return err
	})
	require.NoError(t, err)
	require.Equal(t, "in the transaction", setting)

	failure := errors.New("failed half-way")
	err = database.WithConn(ctx, db.DB, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, `BEGIN`); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, `CREATE TABLE left_behind (id int)`); err != nil {
			return err
		}
		return failure
	})
	require.ErrorIs(t, err, failure)
	require.Equal(t, before, pid(), "the session was kept")
	var exists bool
	require.NoError(t, db.QueryRowContext(ctx, `SELECT to_regclass('left_behind') IS NOT NULL`).Scan(&exists))
	require.False(t, exists, "the open transaction was rolled back")

	err = database.WithConn(ctx, db.DB, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `BEGIN`)
		return err // and forgets to commit
	})
	require.ErrorContains(t, err, "transaction open")
	require.Equal(t, before, pid(), "rolled back, the session kept")

	foreign, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = foreign.Close() })
	err = database.WithConn(ctx, foreign, func(*pgx.Conn) error { return nil })
	require.ErrorContains(t, err, "opened by package database")
}

// CreateDatabase creates a database once; asked again, it finds it.
func TestCreateDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin := pgtest.Cluster().URL("postgres")
	name := "created_" + strings.ReplaceAll(uuid.New(), "-", "")
	require.NoError(t, database.CreateDatabase(ctx, admin, name))
	require.NoError(t, database.CreateDatabase(ctx, admin, name), "an existing database is left as it is")
	db, err := database.Open(ctx, pgtest.Cluster().URL(name), 1)
	require.NoError(t, err, "the database exists")
	require.NoError(t, db.Close())
}
