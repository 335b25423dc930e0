package refdata_test

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/access"
	"hearth/app/command"
	"hearth/domain/apperr"
	"hearth/domain/reference"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
	"hearth/internal/refdata"
)

// A worker's sign-in under way as their staff member is made inactive:
// the sign-in read the staff member active, and its session is written
// after the deactivation deleted the key's sessions. Either the
// deactivation waits for the sign-in and ends its session too, or the
// sign-in is refused: never a session that outlives the deactivation (it
// would come back when the staff member is made active again).
//
// The sign-in is held between its read and its write by a session of the
// same token inserted, not committed, by another transaction: its insert
// waits on the unique index until that transaction rolls back.
func TestASignInNeverOutlivesItsStaffMembersDeactivation(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	store, err := refdata.New(db)
	require.NoError(t, err)
	ctx := context.Background()
	merchant, staff, keyID := uuid.New(), uuid.New(), uuid.New()
	_, err = db.DB.Exec(`INSERT INTO merchants (id, name) VALUES ($1, $2)`, merchant, "m-"+merchant)
	require.NoError(t, err)
	_, err = db.DB.Exec(`INSERT INTO staff (id, merchant_id, name, active) VALUES ($1, $2, 'Wanda', true)`, staff, merchant)
	require.NoError(t, err)
	sum := sha256.Sum256([]byte("hk_" + keyID))
	_, err = db.DB.Exec(`INSERT INTO api_keys (id, merchant_id, role, staff_id, key_hash) VALUES ($1, $2, 'worker', $3, $4)`,
		keyID, merchant, staff, sum[:])
	require.NoError(t, err)
	token := sha256.Sum256([]byte("session " + keyID))
	now := time.Now()

	blocker, err := db.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = blocker.Exec(`INSERT INTO console_sessions (token_hash, key_id, time_zone, created_at, last_seen_at, ends_at, expires_at)
		VALUES ($1, $2, 'UTC', $3, $3, $4, $4)`, token[:], keyID, now, now.Add(time.Hour))
	require.NoError(t, err)
	signedIn := make(chan error, 1)
	go func() {
		signedIn <- store.OpenSession(ctx, access.NewSession{TokenHash: token[:], KeyID: keyID, TimeZone: "UTC", At: now,
			Idle: time.Hour, Lifetime: time.Hour, PerKey: 5})
	}()
	require.False(t, pgtest.DoneOrWaiting(t, db.DB, signedIn), "the sign-in waits for the uncommitted session of its token")

	records, err := command.NewRecords[reference.StaffMember](refdata.Staff(db))
	require.NoError(t, err)
	deactivated := make(chan error, 1)
	go func() {
		_, err := records.Update(ctx, merchant, "key:test", staff, func(s *reference.StaffMember) { s.Active = false }, time.Now())
		deactivated <- err
	}()
	// The deactivation either ends, or waits too (for the sign-in).
	deadline := time.Now().Add(10 * time.Second)
	for len(deactivated) == 0 {
		var waiting int
		require.NoError(t, db.DB.QueryRow(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		if waiting >= 2 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the deactivation neither ended nor waited for a lock")
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, blocker.Rollback())
	signInErr := <-signedIn
	require.NoError(t, <-deactivated)

	var sessions int
	require.NoError(t, db.DB.QueryRow(`SELECT count(*) FROM console_sessions WHERE key_id = $1`, keyID).Scan(&sessions))
	if signInErr == nil {
		require.Zero(t, sessions, "the sign-in committed while its staff member was being made inactive: its session must end with the others")
	} else {
		require.ErrorIs(t, signInErr, apperr.ErrNotFound)
		require.Zero(t, sessions)
	}
}
