package migrations_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/domain/civil"
	"hearth/internal/pgtest"
	"hearth/migrations"
)

// Migration eventstore/026 moves the merchants' time zones that
// civil.LoadZone now refuses (saved before it checked them) to a real
// zone, so availability and new plans do not answer 422 for them: the
// second copies of a zone (posix/, right/) and other spellings of a name to
// the zone itself, the machine's zone (Local, localtime, posixrules: not
// knowable from the database) to UTC, the column's default.
func TestMerchantTimeZoneMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("pgx", pgtest.NewEmptyDB(t))
	require.NoError(t, err)
	defer db.Close()
	later := applyBefore(t, db, 25)
	want := map[string]string{
		"Europe/London":        "Europe/London",
		"localtime":            "UTC",
		"posixrules":           "UTC",
		"Local":                "UTC",
		"posix/Europe/Paris":   "Europe/Paris",
		"right/Asia/Tokyo":     "Asia/Tokyo",
		"Europe//London":       "Europe/London",
		"./UTC":                "UTC",
		"America/./New_York":   "America/New_York",
		"/etc/localtime":       "UTC",
		"../zoneinfo/Etc/UTC":  "UTC",
		"posix/../posixrules/": "UTC",
	}
	names := map[string]string{}
	i := 0
	for zone := range want {
		i++
		id := "00000000-0000-4000-8000-0000000001" + string(rune('a'+i/10)) + string(rune('0'+i%10))
		names[id] = zone
		_, err := db.ExecContext(ctx, `INSERT INTO merchants (id, name, time_zone) VALUES ($1, $2, $3)`, id, "m"+id, zone)
		require.NoError(t, err)
	}
	n, err := migrations.Apply(ctx, db, migrations.EventStore)
	require.NoError(t, err)
	require.Equal(t, later, n)
	for id, zone := range names {
		var got string
		require.NoError(t, db.QueryRowContext(ctx, `SELECT time_zone FROM merchants WHERE id = $1`, id).Scan(&got))
		require.Equal(t, want[zone], got, zone)
		_, err := civil.LoadZone("time_zone", got)
		require.NoError(t, err, got)
	}
}
