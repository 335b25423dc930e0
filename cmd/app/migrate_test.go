package main

import (
	"bytes"
	"database/sql"
	"log/slog"
	"testing"

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
