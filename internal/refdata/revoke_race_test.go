package refdata_test

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/access"
	"hearth/app/command"
	"hearth/app/ops"
	"hearth/domain/reference"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
	"hearth/internal/refdata"
)

// A key is revoked while a write checked by it is under way: after the
// write's transaction checked the key (its first statement), before it
// commits (inside the record's update). Either the revocation waits for
// the write, which then was made while the key worked, or the write is
// refused (access.ErrKeyRefused): never a write that commits after the
// revocation answered. Both checks: the API's (the key's secret) and the
// console's (a session of the key).
func TestAReferenceWriteNeverCommitsAfterItsKeyWasRevoked(t *testing.T) {
	t.Parallel()
	for name, check := range map[string]func(store *refdata.Store, keyID, secret string, token []byte) *access.KeyCheck{
		"api key": func(store *refdata.Store, keyID, secret string, _ []byte) *access.KeyCheck {
			return store.KeyCheck(access.Principal{KeyID: keyID, Role: access.Operator}, secret)
		},
		"console session": func(store *refdata.Store, keyID, _ string, token []byte) *access.KeyCheck {
			return store.SessionCheck(token, keyID, time.Now())
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
			store, err := refdata.New(db)
			require.NoError(t, err)
			ctx := context.Background()
			merchant, staff := uuid.New(), uuid.New()
			_, err = db.DB.Exec(`INSERT INTO merchants (id, name) VALUES ($1, $2)`, merchant, "m-"+merchant)
			require.NoError(t, err)
			_, err = db.DB.Exec(`INSERT INTO staff (id, merchant_id, name) VALUES ($1, $2, 'Wanda')`, staff, merchant)
			require.NoError(t, err)
			keyID, secret := uuid.New(), "hk_"+uuid.New()
			sum := sha256.Sum256([]byte(secret))
			_, err = db.DB.Exec(`INSERT INTO api_keys (id, merchant_id, role, key_hash) VALUES ($1, $2, 'operator', $3)`, keyID, merchant, sum[:])
			require.NoError(t, err)
			token := sha256.Sum256([]byte("session " + keyID))
			require.NoError(t, store.OpenSession(ctx, access.NewSession{TokenHash: token[:], KeyID: keyID, TimeZone: "UTC", At: time.Now(),
				Idle: time.Hour, Lifetime: time.Hour, PerKey: 5}))

			records, err := command.NewRecords[reference.StaffMember](refdata.Staff(db))
			require.NoError(t, err)
			done := make(chan error, 1)
			revokedFirst := false
			c := check(store, keyID, secret, token[:])
			_, err = records.Update(access.WithKeyCheck(ctx, c), merchant, "key:"+keyID, staff, func(s *reference.StaffMember) {
				go func() {
					_, err := store.RevokeKey(ctx, keyID, func(_, after access.Key) ops.AuditEntry {
						return ops.AuditEntry{Actor: "test", Action: ops.ActionKeyRevoke, Target: "key/" + after.ID}
					})
					done <- err
				}()
				// The revocation either commits, or waits for a lock the
				// write holds.
				revokedFirst = pgtest.DoneOrWaiting(t, db.DB, done)
				s.Phone = "+44 20 7946 0000"
			}, time.Now())
			require.True(t, c.Passed(), "the key worked when the write checked it")
			require.NoError(t, <-done, "the key is revoked")
			var phone string
			require.NoError(t, db.DB.QueryRow(`SELECT phone FROM staff WHERE id = $1`, staff).Scan(&phone))
			if revokedFirst {
				require.ErrorIs(t, err, access.ErrKeyRefused, "the key was revoked before the write committed: it must write nothing")
				require.Empty(t, phone)
			} else {
				require.NoError(t, err, "the revocation waited for the write, made while the key worked")
				require.NotEmpty(t, phone)
			}
		})
	}
}
