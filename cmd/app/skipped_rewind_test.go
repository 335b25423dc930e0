package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// An event an operator skipped is applied as skipped wherever it is read
// again (operations.md, "Clear: skip": verify and rebuild fold it so, and
// so must the projections): a read model restored from a backup taken
// before the skip, its projections rewound as the runbook says, reads the
// topic again and must move past the skipped event as the skip did, not
// apply it as itself now that it would apply, or verify fails for good
// (a rebuild keeps the change log, whose row then names the event's type,
// not "skipped").
//
// Not parallel: the failing handler retries inside its subscriber's
// transaction (architecture.md).
func TestARewoundProjectionAppliesASkippedEventAsSkipped(t *testing.T) {
	urls := pgtest.NewSplitDBs(t)
	ctx := t.Context()
	var bad, dump string
	dir := t.TempDir() // the backup outlives the subtest
	t.Run("the skip", func(t *testing.T) {
		a := setup(t, urls)
		bad = a.createOrder(a.opA, a.createCustomer(a.opA, "Ada"), 100)
		a.awaitOrder(a.opA, bad, 1)
		dump = filepath.Join(dir, "rm.dump")
		require.NoError(t, os.Rename(backup(t, urls.ReadModel), dump))
		_, err := a.dbs.rm.DB.Exec(fmt.Sprintf(`ALTER TABLE orders ADD CONSTRAINT parked_cause CHECK (id <> '%s' OR status = 'pending')`, bad))
		require.NoError(t, err)
		a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+bad+"/status", a.opA, map[string]any{"status": "confirmed"})
		a.awaitParked(bad)
		out, err := cli(ctx, a.urls(), "parked", "skip", "orders", bad, "--reason", "bad data")
		require.NoError(t, err, out)
		require.Equal(t, "pending", a.awaitOrder(a.opA, bad, 2).Body["status"], "skipped: a version bump only")
		out, err = cli(ctx, a.urls(), "verify", "--recheck", "0")
		require.NoError(t, err, out)
	})

	restored := pgtest.URLs{EventStore: urls.EventStore, ReadModel: restoreBackup(t, dump)}
	out, err := cli(ctx, restored, "projections", "rewind", "--by", "ops: restore")
	require.NoError(t, err, out)
	b := setup(t, restored)
	require.Equal(t, "pending", b.awaitOrder(b.opA, bad, 2).Body["status"],
		"the rewound projection applied the skipped event as itself")
	out, err = cli(ctx, restored, "verify", "--recheck", "0")
	require.NoError(t, err, out)
}
