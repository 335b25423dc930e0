package pubsub

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/domain/uuid"
	"hearth/internal/pgtest"
)

// A staff member's erasure empties their worker keys' names in the audit
// log, inside the transaction that holds their lock. The log is never
// pruned: that look must be an index's, not a read of the whole log.
func TestAStaffErasureFindsItsKeysAuditEntriesByIndex(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	_, err := db.ExecContext(t.Context(), `INSERT INTO admin_audit (actor, action, target, details)
		SELECT 'key:x', 'key.create', 'key/' || i, jsonb_build_object('staff_id', gen_random_uuid()::text, 'name', 'phone ' || i)
		FROM generate_series(1, 20000) AS i`)
	require.NoError(t, err)
	_, err = db.ExecContext(t.Context(), `ANALYZE admin_audit`)
	require.NoError(t, err)
	where := strings.ReplaceAll(staffKeyNamesInAudit, "$1", "'"+uuid.New()+"'")
	plan, raw := pgtest.Explain(t, db, `SELECT 1 FROM admin_audit WHERE `+where)
	plan.Walk(func(n pgtest.PlanNode) {
		require.NotEqual(t, "Seq Scan", n.NodeType, "the staff erasure reads the whole audit log:\n%s", raw)
	})
}
