package database_test

import (
	"context"
	"os"
	"testing"

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
