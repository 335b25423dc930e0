package main

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// An admin key has no CRM data, on the console too: the verification it
// runs on the on-call page names each difference (projection, aggregate,
// what differs) but never shows the values of an order's fields or of its
// change log, which are the merchant's data (a note about a person here),
// whichever side holds them.
func TestConsoleVerificationShowsAnAdminNoCRMData(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	order := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA,
		map[string]any{"customer_id": customer, "amount_cents": 4711, "notes": "Key under the blue flowerpot"}).Body["id"].(string)
	a.awaitOrder(a.opA, order, 1)
	// The read model drifts from the event log (a hand-made repair, a bug).
	_, err := a.dbs.rm.DB.ExecContext(t.Context(), `UPDATE orders SET notes = 'Alarm code 2580', amount_cents = 1234 WHERE id = $1`, order)
	require.NoError(t, err)
	_, err = a.dbs.rm.DB.ExecContext(t.Context(), `UPDATE change_log SET after = jsonb_set(after, '{notes}', '"Alarm code 2580"') WHERE aggregate_id = $1`, order)
	require.NoError(t, err)

	oncall := newConsoleClient(t, a.base)
	oncall.signIn(a.admin)
	_, _, page := oncall.do(http.MethodGet, "/console/oncall", nil)
	m := csrfTokenRe.FindStringSubmatch(page)
	require.NotNil(t, m, "the on-call page has a form")
	status, _, body := oncall.do(http.MethodPost, "/console/oncall/verify", url.Values{"csrf": {m[1]}, "projection": {"orders"}})
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Eventually(t, func() bool {
		_, _, page = oncall.do(http.MethodGet, "/console/oncall", nil)
		return strings.Contains(page, `id="verify-status"`)
	}, 30*time.Second, 20*time.Millisecond, "the verification finishes")

	require.Contains(t, page, order, "the difference is named by its aggregate")
	require.Contains(t, page, "notes", "and by what differs")
	for _, crm := range []string{"Key under the blue flowerpot", "Alarm code 2580", "4711", "1234"} {
		require.NotContains(t, page, crm, "an admin sees no CRM data")
	}
}
