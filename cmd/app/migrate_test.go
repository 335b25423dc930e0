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
