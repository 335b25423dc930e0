package httpport

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/order"
	"hearth/domain/servicerequest"
)

// The domain names the rule; the API's problem adds the route that does
// what the rule asks, as it always has.
func TestRuleProblemsNameTheRoute(t *testing.T) {
	t.Parallel()
	o, err := order.New(order.NewOrder{ID: "00000000-0000-0000-0000-000000000001", CustomerID: "00000000-0000-0000-0000-000000000003", AmountCents: 1})
	require.NoError(t, err)
	r, err := servicerequest.New("00000000-0000-0000-0000-000000000002", "00000000-0000-0000-0000-000000000003", servicerequest.Sources[0],
		servicerequest.Details{Content: "tap"})
	require.NoError(t, err)
	for _, c := range []struct {
		err         error
		rule, route string
	}{
		{o.ChangeStatus(order.StatusCancelled, time.Now()), order.RuleCancelNeedsReason,
			"cancel an order with POST /v1/orders/{id}/cancel and a reason"},
		{r.ChangeStatus(servicerequest.StatusConverted), servicerequest.RuleConvertOnlyByConversion,
			"convert a request with POST /v1/service-requests/{id}/convert"},
	} {
		require.Error(t, c.err)
		require.NotContains(t, c.err.Error(), "/v1", "the domain names no route")
		rec := httptest.NewRecorder()
		(&server{}).writeError(rec, httptest.NewRequest("POST", "/", nil), c.err)
		var p problem
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
		require.Equal(t, 422, p.Status)
		require.Equal(t, c.rule, p.Rule)
		require.Equal(t, c.route, p.Detail)
	}
}
