package main

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// An instance of an older release started against a schema a newer one
// migrated (a rolling upgrade under way, a rollback) runs, as a rolling
// upgrade needs, but says so: its log names the migrations it does not
// know, so that an operator who rolled back sees the schema did not.
func TestMigrateWarnsOfASchemaNewerThanTheBinary(t *testing.T) {
	t.Parallel()
	for name, layout := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			urls := layout(t)
			db, err := sql.Open("pgx", urls.ReadModel)
			require.NoError(t, err)
			defer db.Close()
			_, err = db.Exec(`INSERT INTO hearth_migrations (set_name, version, name) VALUES ('readmodel', 9999, '9999_next_release.sql')`)
			require.NoError(t, err)

			var out bytes.Buffer
			log := slog.New(slog.NewTextHandler(&out, nil))
			cfg := Config{DatabaseURL: urls.EventStore, ReadModelDatabaseURL: urls.ReadModel}
			require.NoError(t, migrate(t.Context(), cfg, log), "an older binary still starts")
			require.Contains(t, out.String(), "level=WARN")
			require.Contains(t, out.String(), "9999_next_release.sql")
			require.Contains(t, out.String(), "set=readmodel")
			require.NotContains(t, out.String(), "set=eventstore versions", "only the set that is ahead")
		})
	}
}

// With the two URLs swapped, the event store's migrations would build an
// empty event store in the read model's database (and the read model's
// tables in the event store's), and the instance would serve from it: every
// key unknown, a key created there a key of a store nobody else reads. The
// start-up must stop instead, naming the mistake, and create nothing.
func TestMigrateRefusesSwappedDatabaseURLs(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewSplitDBs(t)
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	cfg := Config{DatabaseURL: urls.ReadModel, ReadModelDatabaseURL: urls.EventStore}
	err := migrate(t.Context(), cfg, log)
	require.ErrorContains(t, err, "swapped")
	_, err = openAdminTools(t.Context(), cfg) // app keys, app audit: the event store alone
	require.ErrorContains(t, err, "swapped")

	for url, table := range map[string]string{urls.ReadModel: "events", urls.EventStore: "change_log"} {
		db, err := sql.Open("pgx", url)
		require.NoError(t, err)
		var exists bool
		require.NoError(t, db.QueryRow(`SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists))
		require.NoError(t, db.Close())
		require.False(t, exists, "%s created where it does not belong", table)
	}
}

// The commands that read events need the master keys, as serve does
// (docs/operations.md). Without them they must stop before they open the
// databases: a migration takes locks on tables the running instances
// use (operations.md, "Locks held while migrating"), so a newer binary's
// `app verify` run without MASTER_KEY would upgrade the production schema,
// at any hour, and only then say it cannot run.
func TestCommandsThatReadEventsRefuseWithoutMasterKeysBeforeMigrating(t *testing.T) {
	t.Parallel()
	id := "0b9f8a2e-6b1c-4c1e-9b7a-3f1e2d4c5b6a"
	for _, args := range [][]string{
		{"verify"},
		{"rebuild", "orders"},
		{"parked", "list"},
		{"parked", "replay", "--all"},
		{"customers", "export", "--merchant", "acme", id},
		{"customers", "erase", "--merchant", "acme", id, "--confirm", id},
		{"staff", "erase", "--merchant", "acme", id, "--confirm", id},
		{"erasures", "list"},
		{"erasures", "run"},
		{"protect"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewEmptyDB(t)
			var stdout, stderr syncBuffer
			err := run(t.Context(), args, env(map[string]string{"DATABASE_URL": url}), &stdout, &stderr)
			require.ErrorContains(t, err, "MASTER_KEY (or MASTER_KEY_FILE) is not set")
			require.NotErrorAs(t, err, new(usageError), "a missing setting is not a bad command line")
			require.Empty(t, stdout.String())

			db, err := sql.Open("pgx", url)
			require.NoError(t, err)
			defer db.Close()
			var migrated bool
			require.NoError(t, db.QueryRow(`SELECT to_regclass('hearth_migrations') IS NOT NULL`).Scan(&migrated))
			require.False(t, migrated, "%s migrated the database before it refused to run without the master keys", args[0])
		})
	}
}

// Instances deployed from different manifests may disagree on
// READMODEL_DATABASE_URL: one worker then projects into a read model the API
// instances do not read, from the consumer offsets every worker shares (in
// the event store), so the events it applies are missing from the other for
// good; and its fencing terms are that database's, so a stale leader of the
// other is not fenced. An instance whose read model is not the one the
// event store's instances use must refuse to start, naming the setting.
func TestAnInstanceWithAnotherReadModelRefusesToStart(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewSplitDBs(t)
	vars := map[string]string{"DATABASE_URL": urls.EventStore, "READMODEL_DATABASE_URL": urls.ReadModel, "LOG_FORMAT": "json"}
	startServe(t, vars)

	other := maps.Clone(vars)
	other["READMODEL_DATABASE_URL"] = pgtest.NewSplitDBs(t).ReadModel
	other["MASTER_KEY"] = testMasterKey
	ctx, stop := context.WithCancel(context.Background())
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--http-addr", "127.0.0.1:0"}, env(other), io.Discard, &stderr)
	}()
	returned := false
	t.Cleanup(func() {
		if stop(); !returned {
			<-done
		}
	})
	var err error
	require.Eventually(t, func() bool {
		select {
		case err = <-done:
			returned = true
			return true
		default:
			return strings.Contains(stderr.String(), `"msg":"hearth started"`)
		}
	}, 30*time.Second, 10*time.Millisecond, "serve neither started nor stopped: %s", &stderr)
	require.Error(t, err, "an instance whose READMODEL_DATABASE_URL names another read model than the other instances' started: %s", &stderr)
	require.ErrorContains(t, err, "READMODEL_DATABASE_URL")
}

// A database not in UTF-8 (SQL_ASCII, a LATIN1 cluster's default) takes
// Hearth's migrations, and then its writes fail one by one with a 500: a
// merchant name compared under NFKC, text Postgres cannot store. An
// instance or command refuses it at start-up instead, naming the database's
// encoding and how to make one in UTF-8, before it migrates anything.
func TestADatabaseNotInUTF8IsRefusedAtStartUp(t *testing.T) {
	t.Parallel()
	admin, err := sql.Open("pgx", pgtest.Cluster().URL("postgres"))
	require.NoError(t, err)
	defer admin.Close()
	name := "ascii_" + strings.ReplaceAll(strings.ToLower(t.Name()), "/", "_")
	_, err = admin.Exec(`CREATE DATABASE ` + name + ` ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`) })
	url := pgtest.Cluster().URL(name)

	var stdout, stderr syncBuffer
	err = run(t.Context(), []string{"migrate"}, env(map[string]string{"DATABASE_URL": url, "MASTER_KEY": testMasterKey}), &stdout, &stderr)
	require.Error(t, err, "a database in SQL_ASCII was migrated")
	require.ErrorContains(t, err, "SQL_ASCII")
	require.ErrorContains(t, err, "ENCODING 'UTF8'", "the error says how to make one that works")
	db, err := sql.Open("pgx", url) // pgx's extended protocol: it runs no simple query here
	require.NoError(t, err)
	defer db.Close()
	var migrated bool
	require.NoError(t, db.QueryRow(`SELECT to_regclass($1) IS NOT NULL`, "hearth_migrations").Scan(&migrated))
	require.False(t, migrated, "nothing was applied to it")
}
