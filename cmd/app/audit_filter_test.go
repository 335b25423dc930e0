package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// A regulator asks who saw or erased one person's data: the audit log
// answers by target (and by action), from the API and the command line,
// however far back, rather than in the newest pages only; the runbook's
// "the export is in the audit log" must hold a year later too.
func TestAuditLogFiltersByTargetAndAction(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ada, bob := a.createCustomer(a.opA, "Ada"), a.createCustomer(a.opA, "Bob")
	for _, c := range []string{ada, bob, ada} {
		a.must(http.StatusOK, http.MethodGet, "/v1/customers/"+c+"/export", a.opA, nil)
	}
	// Newer entries of other actions, more than a page of the CLI's.
	for range 3 {
		a.must(http.StatusCreated, http.MethodPost, "/admin/keys", a.admin, map[string]any{"role": "operator", "merchant_id": a.merchantA})
	}

	targets := func(path string) []string {
		r := a.must(http.StatusOK, http.MethodGet, path, a.admin, nil)
		var out []string
		for _, it := range r.Body["items"].([]any) {
			e := it.(map[string]any)
			out = append(out, e["action"].(string)+" "+e["target"].(string))
		}
		require.EqualValues(t, len(out), r.Body["total"], "%s", r)
		return out
	}
	require.Equal(t, []string{"customer.export customer/" + ada, "customer.export customer/" + ada},
		targets("/admin/audit?target=customer/"+ada), "Ada's entries only")
	require.Equal(t, []string{"customer.export customer/" + ada, "customer.export customer/" + bob, "customer.export customer/" + ada},
		targets("/admin/audit?action=customer.export"), "the exports only, newest first")
	require.Equal(t, []string{"customer.export customer/" + bob},
		targets("/admin/audit?action=customer.export&target=customer/"+bob), "both filters")
	require.Empty(t, targets("/admin/audit?target=customer/"+ada+"&action=customer.erase"), "no erasure of Ada")
	r := a.do(http.MethodGet, "/admin/audit?target="+strings.Repeat("x", 201), a.admin, nil)
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r)
	require.Contains(t, r.Raw, "target", "%s", r)

	out, err := cli(t.Context(), a.urls(), "audit", "list", "--limit", "2", "--target", "customer/"+ada)
	require.NoError(t, err, out)
	require.Equal(t, 2, strings.Count(out, "customer/"+ada), "%s", out)
	require.NotContains(t, out, "key.create", "%s", out)
	require.NotContains(t, out, bob, "%s", out)
	out, err = cli(t.Context(), a.urls(), "audit", "list", "--action", "customer.export", "--json")
	require.NoError(t, err, out)
	require.Equal(t, 3, strings.Count(out, `"customer.export"`), "%s", out)
}
