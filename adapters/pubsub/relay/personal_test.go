package relay_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/command"
	"hearth/domain/servicerequest"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
)

// The stream never gets personal data (docs/personal-data.md): with every
// personal field the commands write (an order's notes, dispatch note,
// settlement note and cancellation reason; a request's content and notes,
// and the notes its order takes on conversion) stored in clear, as before
// sealing, and one more order's notes in an event that no longer decodes
// and was skipped, no message's payload, headers or subject holds any of
// them, and each such field is null and named withheld.
func TestRelayWithholdsEveryPersonalField(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	ctx := context.Background()
	const mark = "MARK-personal"
	text := func(field string) string { return mark + "-" + field }
	ptr := func(s string) *string { return &s }

	staff := uuid.New()
	_, err := f.ES.DB.Exec(`INSERT INTO staff (id, merchant_id, name) VALUES ($1, $2, 'Wanda')`, staff, f.MerchantID)
	require.NoError(t, err)
	w, err := f.OrderCmds.Create(ctx, command.CreateOrder{Meta: f.Meta(), CustomerID: f.CustomerID, AmountCents: 500, Notes: text("created-notes")})
	require.NoError(t, err)
	o := w.Stream[0].StreamID
	target := command.OrderTarget{Meta: f.Meta(), OrderID: o}
	_, err = f.OrderCmds.UpdateDetails(ctx, command.UpdateOrderDetails{OrderTarget: target, Notes: ptr(text("updated-notes"))})
	require.NoError(t, err)
	start := time.Now().Add(24 * time.Hour).Truncate(time.Hour)
	_, err = f.OrderCmds.Assign(ctx, command.AssignOrder{OrderTarget: target, StaffID: staff, StartAt: start, EndAt: start.Add(time.Hour),
		DispatchNote: text("dispatch-note")})
	require.NoError(t, err)
	_, err = f.OrderCmds.Settle(ctx, command.SettleOrder{OrderTarget: target, SettlementStatus: "unsettled", PaymentMethod: "card",
		SettlementNote: text("settlement-note")})
	require.NoError(t, err)
	_, err = f.OrderCmds.Cancel(ctx, command.CancelOrder{OrderTarget: target, Reason: text("reason")})
	require.NoError(t, err)

	w, err = f.requests.Create(ctx, command.CreateServiceRequest{Meta: f.Meta(), CustomerID: f.CustomerID, Source: "phone",
		Details: servicerequest.Details{Content: text("request-content"), Notes: text("request-notes")}})
	require.NoError(t, err)
	req := command.RequestTarget{Meta: f.Meta(), RequestID: w.Stream[0].StreamID}
	_, err = f.requests.UpdateDetails(ctx, command.UpdateServiceRequest{RequestTarget: req,
		Content: ptr(text("updated-content")), Notes: ptr(text("updated-request-notes"))})
	require.NoError(t, err)
	_, err = f.requests.ChangeStatus(ctx, command.ChangeServiceRequestStatus{RequestTarget: req, Status: "confirmed"})
	require.NoError(t, err)
	_, err = f.requests.Convert(ctx, req)
	require.NoError(t, err)

	// An order whose created event no longer decodes, its notes in clear,
	// skipped by the operator: the relay reads its envelope only.
	w, err = f.OrderCmds.Create(ctx, command.CreateOrder{Meta: f.Meta(), CustomerID: f.CustomerID, AmountCents: 500, Notes: text("skipped-notes")})
	require.NoError(t, err)
	bad := w.Stream[0].StreamID
	var badID string
	require.NoError(t, f.ES.DB.QueryRow(`UPDATE events SET type = 'OrderTeleported' WHERE stream_id = $1 RETURNING event_id::text`, bad).Scan(&badID))
	_, err = f.ES.DB.Exec(`UPDATE watermill_orders SET payload = jsonb_set(payload::jsonb, '{type}', '"OrderTeleported"')::json
		WHERE payload->>'event_id' = $1`, badID)
	require.NoError(t, err)
	_, err = f.ES.DB.Exec(`INSERT INTO skipped_events (projection, event_id, stream_id, version, type, skipped_by, reason)
		VALUES ('orders', $1, $2, 1, 'OrderTeleported', 'key:test', 'no such event')`, badID, bad)
	require.NoError(t, err)

	// The premise: the store holds them in clear.
	var clear int
	require.NoError(t, f.ES.DB.QueryRow(`SELECT count(*) FROM events WHERE data::text LIKE '%' || $1 || '%'`, mark).Scan(&clear))
	require.Equal(t, 9, clear, "every personal field is stored in clear")

	f.startInstance(t, "a", f.config())
	msgs := f.requireAllRelayed(t)
	withheld := map[string][]string{}
	for _, m := range msgs {
		raw, err := f.js.GetMsg(stream, m.seq)
		require.NoError(t, err)
		require.NotContains(t, raw.Subject, mark)
		for k, vs := range raw.Header {
			require.NotContains(t, k, mark)
			for _, v := range vs {
				require.NotContains(t, v, mark, "header %s of %s", k, raw.Subject)
			}
		}
		require.NotContains(t, string(raw.Data), mark, raw.Subject)
		var pe struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		require.NoError(t, json.Unmarshal(raw.Data, &pe))
		if names, ok := pe.Data["withheld"].([]any); ok {
			for _, n := range names {
				require.Contains(t, pe.Data, n, pe.Type)
				require.Nil(t, pe.Data[n.(string)], "%s's %s", pe.Type, n)
				withheld[pe.Type] = append(withheld[pe.Type], n.(string))
			}
		}
		if m.streamID == bad && m.version == 1 {
			require.Equal(t, "order.event_skipped", pe.Type)
		}
	}
	require.Equal(t, map[string][]string{
		"order.created":                   {"notes", "notes"}, // the order's, and the converted request's
		"order.details_updated":           {"notes"},
		"order.assignment_updated":        {"dispatch_note"},
		"order.settlement_updated":        {"settlement_note"},
		"order.cancelled":                 {"reason"},
		"schedule.created":                {"notes"}, // empty: no command writes a schedule's notes
		"service_request.created":         {"content", "notes"},
		"service_request.details_updated": {"content", "notes"},
	}, withheld)
}
