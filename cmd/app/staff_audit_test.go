package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// Making a staff member inactive turns their worker keys and console
// sessions off, and making them active again turns them back on: an
// access change, as a key's revocation is, so it is in the audit log with
// who made it. A change of anything else, a PATCH that changes nothing and
// a refused one record nothing; a retry with its Idempotency-Key nothing
// more.
func TestStaffActivityChangesAreAudited(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	id := a.must(http.StatusCreated, http.MethodPost, "/v1/staff", a.opA, map[string]any{"name": "Grace"}).Body["id"].(string)
	path := "/v1/staff/" + id

	retry := auth(a.opA)
	retry.Set("Idempotency-Key", "off-once")
	for range 2 {
		r, err := a.send(http.MethodPatch, path, retry, map[string]any{"active": false})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, r.Status, "%s", r)
	}
	a.must(http.StatusOK, http.MethodPatch, path, a.opA, map[string]any{"active": false})
	a.must(http.StatusOK, http.MethodPatch, path, a.opA, map[string]any{"name": "Grace H."})
	a.must(http.StatusUnprocessableEntity, http.MethodPatch, path, a.opA, map[string]any{"name": "", "active": true})
	a.must(http.StatusOK, http.MethodPatch, path, a.opA, map[string]any{"active": true})

	lines, entries := a.auditLog()
	actor, target := "key:"+a.opAKeyID, "staff_member/"+id
	require.Equal(t, []string{"staff_member.activate " + target + " " + actor, "staff_member.deactivate " + target + " " + actor},
		lines[:min(2, len(lines))], "each change of the staff member's activity once, and nothing else")
	require.NotContains(t, lines[2], "staff_member.", "%q", lines)
	require.Equal(t, map[string]any{"merchant_id": a.merchantA}, entries[0]["details"])
}
