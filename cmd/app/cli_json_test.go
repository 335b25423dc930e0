package main

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// `--json` of `app keys list`, `app audit list` and `app parked list`
// prints exactly the items the admin API answers.
func TestCLIJSONIsTheAdminAPIs(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	a.must(http.StatusCreated, http.MethodPost, "/admin/keys", a.admin, map[string]any{"role": "operator", "merchant": "acme", "name": "ci"})
	for _, tc := range []struct {
		cli  []string
		path string
	}{
		{[]string{"keys", "list", "--json"}, "/admin/keys?page_size=200"},
		{[]string{"audit", "list", "--json"}, "/admin/audit?page_size=50"},
		{[]string{"parked", "list", "--json"}, "/admin/parked"},
	} {
		out, err := cli(t.Context(), a.urls(), tc.cli...)
		require.NoError(t, err)
		var fromCLI []any
		require.NoError(t, json.Unmarshal([]byte(out), &fromCLI), out)
		fromAPI := a.must(http.StatusOK, http.MethodGet, tc.path, a.admin, nil).Body["items"]
		require.Equal(t, fromAPI, any(fromCLI), "%q", tc.cli)
	}
	require.Len(t, a.must(http.StatusOK, http.MethodGet, "/admin/keys", a.admin, nil).Body["items"], 5)
}
