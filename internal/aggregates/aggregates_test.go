package aggregates_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/aggregates"
)

func TestRegistry(t *testing.T) {
	t.Parallel()
	names := aggregates.Projections()
	require.Equal(t, []string{"orders", "plans", "schedules", "service_requests"}, names)
	require.True(t, slices.IsSorted(names))
	types := map[string]bool{}
	for _, f := range aggregates.All() {
		require.False(t, types[f.Type], "stream type %s twice", f.Type)
		types[f.Type] = true
		require.NotNil(t, f.Decode, f.Type)
		got, ok := aggregates.ByType(f.Type)
		require.True(t, ok)
		require.Equal(t, f.Projection, got.Projection)
	}
	_, ok := aggregates.ByType("nothing")
	require.False(t, ok)
}

// A stored event read back without a value Hearth always writes (the key
// missing, or null: a hand-edited or corrupt row, a bug of another writer)
// does not decode: applied, its zero value would set an order's status to
// "", publish order.status_changed to "", or rehydrate an aggregate a
// command then decides on. Every reader of stored events decodes through
// these decoders, and answers a decoding error as its own (a projection
// parks the aggregate with the reason, the feed and webhooks stop before
// the event, a command fails).
func TestDecodeRefusesAMissingRequiredValue(t *testing.T) {
	t.Parallel()
	const (
		at    = `"2026-12-01T09:00:00Z"`
		later = `"2026-12-01T11:00:00Z"`
	)
	cases := []struct {
		facts   aggregates.Facts
		typ     string
		payload string
		field   string
	}{
		{aggregates.Order.Facts, "OrderCreated", `{"order_id":"o","customer_id":"c","amount_cents":1,"notes":""}`, "status"},
		{aggregates.Order.Facts, "OrderCreated", `{"order_id":"o","customer_id":null,"amount_cents":1,"status":"pending"}`, "customer_id"},
		{aggregates.Order.Facts, "OrderCreated", `{"customer_id":"c","amount_cents":1,"status":"pending"}`, "order_id"},
		{aggregates.Order.Facts, "OrderDetailsUpdated", `{"amount_cents":1,"notes":""}`, "customer_id"},
		{aggregates.Order.Facts, "OrderStatusChanged", `{"from":"pending","to":null}`, "to"},
		{aggregates.Order.Facts, "OrderStatusChanged", `{"to":"confirmed"}`, "from"},
		{aggregates.Order.Facts, "OrderCancelled", `{"reason":"moved away"}`, "from"},
		{aggregates.Order.Facts, "OrderSettlementUpdated", `{"paid_amount_cents":1,"payment_method":"card"}`, "settlement_status"},
		{aggregates.Schedule.Facts, "ScheduleCreated", `{"schedule_id":"s","order_id":"o","start_at":` + at + `,"end_at":` + later + `,"status":"planned"}`, "staff_id"},
		{aggregates.Schedule.Facts, "ScheduleCreated", `{"schedule_id":"s","order_id":"o","staff_id":"x","start_at":null,"end_at":` + later + `,"status":"planned"}`, "start_at"},
		{aggregates.Schedule.Facts, "ScheduleAssignmentUpdated", `{"staff_id":"x","start_at":` + at + `}`, "end_at"},
		{aggregates.Schedule.Facts, "ScheduleStatusChanged", `{"from":"planned"}`, "to"},
		{aggregates.ServiceRequest.Facts, "ServiceRequestCreated", `{"request_id":"r","customer_id":"c","content":"leak","source":"phone"}`, "status"},
		{aggregates.ServiceRequest.Facts, "ServiceRequestCreated", `{"request_id":"r","content":"leak","source":"phone","status":"new"}`, "customer_id"},
		{aggregates.ServiceRequest.Facts, "ServiceRequestStatusChanged", `{"from":"new","to":""}`, "to"},
		{aggregates.ServiceRequest.Facts, "ServiceRequestConverted", `{}`, "order_id"},
		{aggregates.Plan.Facts, "ServicePlanCreated", `{"customer_id":"c","catalog_item_id":"i","time_zone":"Europe/Paris"}`, "plan_id"},
		{aggregates.Plan.Facts, "ServicePlanPaused", `{"at":null}`, "at"},
		{aggregates.Plan.Facts, "ServicePlanVisitSkipped", `{}`, "date"},
		{aggregates.Order.Facts, "PersonalDataErased", `{"subject_type":"customer"}`, "subject_id"},
		{aggregates.Subjects, "SubjectErased", `{"subject_id":"c"}`, "subject_type"},
	}
	for _, c := range cases {
		_, err := c.facts.Decode(c.typ, []byte(c.payload))
		require.Error(t, err, "%s %s decoded without %s", c.typ, c.payload, c.field)
		require.Contains(t, err.Error(), c.typ, "the error names the event type")
		require.Contains(t, err.Error(), `"`+c.field+`"`, "the error names the missing field")
	}
}
