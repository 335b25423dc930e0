package migrations_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
	"hearth/migrations"
)

// A database that recorded one of this binary's versions under another
// file's name was migrated by another build (a branch that numbered its own
// migration the same): this binary's file of that version never ran there.
// Apply must say so rather than take it as applied and start on a schema
// that lacks it.
func TestApplyRefusesAVersionRecordedUnderAnotherName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("pgx", pgtest.NewEmptyDB(t))
	require.NoError(t, err)
	defer db.Close()
	applyBefore(t, db, 26) // 026 and later not applied
	_, err = db.ExecContext(ctx, `INSERT INTO hearth_migrations (set_name, version, name) VALUES ('eventstore', 26, '026_another_branch.sql')`)
	require.NoError(t, err)

	_, err = migrations.Apply(ctx, db, migrations.EventStore)
	require.ErrorContains(t, err, "026_another_branch.sql")
	require.ErrorContains(t, err, "026_merchant_time_zones.sql")
}
