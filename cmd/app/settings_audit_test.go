package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// The merchant's time zone decides when every plan created afterwards has
// its visits: who changed it, from what to what, is in the audit log; a
// refused change records nothing, a retry with its Idempotency-Key nothing
// more.
func TestSettingsChangesAreAudited(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	retry := auth(a.opA)
	retry.Set("Idempotency-Key", "zone-once")
	for range 2 {
		r, err := a.send(http.MethodPut, "/v1/settings", retry, map[string]any{"time_zone": "Europe/London"})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, r.Status, "%s", r)
	}
	a.must(http.StatusUnprocessableEntity, http.MethodPut, "/v1/settings", a.opA, map[string]any{"time_zone": "Mars/Olympus"})
	a.must(http.StatusOK, http.MethodPut, "/v1/settings", a.opA, map[string]any{"time_zone": "Australia/Sydney"})

	lines, entries := a.auditLog()
	actor, target := "key:"+a.opAKeyID, "merchant/"+a.merchantA
	require.Equal(t, []string{"settings.update " + target + " " + actor, "settings.update " + target + " " + actor},
		lines[:min(2, len(lines))], "each change once, and nothing of the refused one")
	require.NotContains(t, lines[2], "settings.update", "%q", lines)
	require.Equal(t, map[string]any{"time_zone": "Australia/Sydney", "time_zone_before": "Europe/London"}, entries[0]["details"])
	require.Equal(t, map[string]any{"time_zone": "Europe/London", "time_zone_before": "UTC"}, entries[1]["details"])
}
