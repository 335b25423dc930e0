package migrations_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/advisory"
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

// A migration that changes a table must wait for every session using it,
// and while it waits every other session's statement on that table queues
// behind it: a transaction that stays open on the table (a pg_dump, an
// operator's psql) would stop the API's writes for as long as it stays.
// Apply gives up after a bound instead, applies nothing, and says which
// migration waited; once the table is free, it applies.
func TestApplyGivesUpOnATableHeldByAnotherSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewEmptyDB(t)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	defer db.Close()
	later := applyBefore(t, db, 24) // 024 alters api_keys

	holder, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	_, err = holder.ExecContext(ctx, `SELECT count(*) FROM api_keys`)
	require.NoError(t, err)

	// The deadline only bounds the test should Apply wait for ever.
	bounded, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = migrations.Apply(bounded, db, migrations.EventStore)
	require.Error(t, err)
	require.NoError(t, bounded.Err(), "Apply gave up on its own, not at the test's deadline")
	require.ErrorContains(t, err, "024_key_replaced_by.sql")
	require.ErrorContains(t, err, "lock_timeout")

	var recorded int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM hearth_migrations WHERE version >= 24`).Scan(&recorded))
	require.Zero(t, recorded, "nothing applied: the run is one transaction")

	// Another session's write to the table is not held behind Apply now.
	_, err = db.ExecContext(bounded, `UPDATE api_keys SET name = name`)
	require.NoError(t, err)

	require.NoError(t, holder.Rollback())
	n, err := migrations.Apply(ctx, db, migrations.EventStore)
	require.NoError(t, err)
	require.Equal(t, later, n)
}

// A database that holds the set's tables but no record of its migrations
// (restored without hearth_migrations, or its rows deleted) makes the first
// migration fail on a table that exists: the error must say what is
// missing, not only Postgres' "already exists".
func TestApplyNamesAMissingRecordOfMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("pgx", pgtest.NewEmptyDB(t))
	require.NoError(t, err)
	defer db.Close()
	_, err = migrations.Apply(ctx, db, migrations.ReadModel)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `DROP TABLE hearth_migrations`)
	require.NoError(t, err)

	_, err = migrations.Apply(ctx, db, migrations.ReadModel)
	require.ErrorContains(t, err, "001_init.sql")
	require.ErrorContains(t, err, "hearth_migrations records none of")
}

// An instance that starts while another migrates waits for the migrations'
// lock; stopped meanwhile (SIGTERM during a rollout, Ctrl-C on `app
// migrate`), it must say what it was waiting for and that nothing of the
// run was applied, not "lock: context canceled" followed by the failure of
// a rollback on the connection the cancel closed.
func TestApplyStoppedWhileAnotherMigratesSaysWhatItWaitedFor(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t).EventStore
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	defer db.Close()
	holder, err := db.BeginTx(context.Background(), nil)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	_, err = holder.Exec(`SELECT pg_advisory_xact_lock($1)`, advisory.MigrationsKey) // another instance, migrating
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := migrations.Apply(ctx, db, migrations.EventStore)
		done <- err
	}()
	require.False(t, pgtest.DoneOrWaiting(t, db, done), "Apply waits for the migrations' lock")
	cancel()
	err = <-done
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "migrations lock")
	require.ErrorContains(t, err, "nothing of this run was applied")
	require.NotContains(t, err.Error(), "rollback", "the cancel ended the transaction; its rollback's failure is noise")
}
