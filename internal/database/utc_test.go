package database_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"hearth/internal/database"
	"hearth/internal/pgtest"
)

// Times read from Postgres come back in UTC, whatever the machine's zone:
// pgx reads a timestamptz into the process's local zone (time.Local), and
// every view, list and export that shows such a time would answer in the
// zone of the server that read it ("2026-12-07T13:31:18-03:30" from an
// instance in St John's, "...Z" from one in UTC), and mix the two with the
// times the domain writes in UTC. Not parallel: it sets time.Local.
func TestTimesAreReadInUTC(t *testing.T) {
	stJohns, err := time.LoadLocation("America/St_Johns")
	require.NoError(t, err)
	saved := time.Local
	time.Local = stJohns
	t.Cleanup(func() { time.Local = saved })

	ctx := context.Background()
	url := pgtest.NewDB(t).EventStore
	db, err := database.Open(ctx, url, 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	want := time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC)
	check := func(how string, got time.Time) {
		t.Helper()
		require.True(t, want.Equal(got), "%s: %v", how, got)
		require.Equal(t, "2026-10-25T01:30:00Z", got.Format(time.RFC3339), "%s: in UTC", how)
	}
	const lit = `SELECT '2026-10-25 01:30:00+00'::timestamptz`
	var got time.Time
	require.NoError(t, db.NewRaw(lit).Scan(ctx, &got))
	check("Bun (simple protocol)", got)
	require.NoError(t, db.DB.QueryRowContext(ctx, `SELECT $1::timestamptz`, want).Scan(&got))
	check("database/sql, prepared", got)
	require.NoError(t, database.WithConn(ctx, db.DB, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT $1::timestamptz`, want).Scan(&got)
	}))
	check("pgx on a pool's connection", got)
	cfg, err := database.ParseConfig(url)
	require.NoError(t, err)
	conn, err := database.Connect(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	require.NoError(t, conn.QueryRow(ctx, lit).Scan(&got))
	check("a dedicated session", got)
}

// Hearth's sessions run in UTC whatever the server's zone: Watermill's
// topic tables stamp created_at as a timestamp without zone
// (CURRENT_TIMESTAMP in the session's zone), and the lag and retention
// ages subtract it from now() in the same zone; in a zone with daylight
// saving, an age across the autumn change reads an hour short (and the
// spring one an hour long), and instances configured with different zones
// would disagree. In UTC a wall-clock time names one instant.
func TestSessionsRunInUTCWhateverTheServersZone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDB(t).EventStore
	admin, err := database.Open(ctx, url, 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	_, err = admin.ExecContext(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET timezone = %L', current_database(), 'America/New_York'); END $$`)
	require.NoError(t, err)
	_, err = admin.ExecContext(ctx, `CREATE TABLE stamped (created_at timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP)`)
	require.NoError(t, err)

	db, err := database.Open(ctx, url, 1) // new sessions: the database's zone applies
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	var inUTC bool
	require.NoError(t, db.DB.QueryRowContext(ctx,
		`INSERT INTO stamped DEFAULT VALUES RETURNING created_at = (now() AT TIME ZONE 'UTC')`).Scan(&inUTC))
	require.True(t, inUTC, "a topic row's created_at is UTC's wall clock")
	cfg, err := database.ParseConfig(url)
	require.NoError(t, err)
	conn, err := database.Connect(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	var zone string
	require.NoError(t, conn.QueryRow(ctx, `SHOW timezone`).Scan(&zone))
	require.Equal(t, "UTC", zone, "a dedicated session (the leader's lock) too")
}
