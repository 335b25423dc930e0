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

// A database migrated by a newer release records versions this binary does
// not have: Apply applies nothing (it cannot undo them) and succeeds, since
// during a rolling upgrade the previous release's instances keep starting;
// Unknown names them, for the warning serve logs.
func TestUnknownNamesTheVersionsOfANewerRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("pgx", pgtest.NewEmptyDB(t))
	require.NoError(t, err)
	defer db.Close()
	_, err = migrations.Apply(ctx, db, migrations.EventStore)
	require.NoError(t, err)
	_, err = migrations.Apply(ctx, db, migrations.ReadModel)
	require.NoError(t, err)

	unknown, err := migrations.Unknown(ctx, db, migrations.EventStore)
	require.NoError(t, err)
	require.Empty(t, unknown, "a schema this binary made holds nothing it does not know")

	_, err = db.ExecContext(ctx, `INSERT INTO hearth_migrations (set_name, version, name) VALUES ('eventstore', 9999, '9999_next_release.sql')`)
	require.NoError(t, err)
	n, err := migrations.Apply(ctx, db, migrations.EventStore)
	require.NoError(t, err)
	require.Zero(t, n)
	unknown, err = migrations.Unknown(ctx, db, migrations.EventStore)
	require.NoError(t, err)
	require.Equal(t, []migrations.Migration{{Version: 9999, Name: "9999_next_release.sql"}}, unknown)
	unknown, err = migrations.Unknown(ctx, db, migrations.ReadModel)
	require.NoError(t, err)
	require.Empty(t, unknown, "per set")
}
