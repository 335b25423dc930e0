package command_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/command"
	"hearth/domain/apperr"
	"hearth/domain/order"
	"hearth/domain/servicerequest"
	"hearth/domain/uuid"
)

func (e env) requestTarget(id string, expected *int) command.RequestTarget {
	return command.RequestTarget{Meta: e.meta(), RequestID: id, ExpectedVersion: expected}
}

func TestCreateServiceRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.createRequest(t)
	require.Equal(t, []string{"ServiceRequestCreated"}, e.tx.Types(id))

	for name, tc := range map[string]struct {
		cmd   command.CreateServiceRequest
		field string
	}{
		"unknown customer": {command.CreateServiceRequest{CustomerID: uuid.New(), Source: "web",
			Details: servicerequest.Details{Content: "x"}}, "customer_id"},
		"unknown catalog item": {command.CreateServiceRequest{CustomerID: e.customer, Source: "web",
			Details: servicerequest.Details{Content: "x", CatalogItemID: uuid.New()}}, "catalog_item_id"},
		"unknown source": {command.CreateServiceRequest{CustomerID: e.customer, Source: "pigeon",
			Details: servicerequest.Details{Content: "x"}}, "source"},
		"no content": {command.CreateServiceRequest{CustomerID: e.customer, Source: "web"}, "content"},
	} {
		t.Run(name, func(t *testing.T) {
			before := e.tx.Position()
			tc.cmd.Meta = e.meta()
			_, err := e.requests.Create(t.Context(), tc.cmd)
			requireField(t, err, tc.field)
			e.unchanged(t, before)
		})
	}
}

func TestServiceRequestCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	anOrder := e.createOrder(t)
	for name, tc := range map[string]struct {
		run   func(id string) (command.Written, error)
		want  []string // events appended, when the command succeeds
		check func(t *testing.T, err error)
	}{
		"update content": {run: func(id string) (command.Written, error) {
			return e.requests.UpdateDetails(t.Context(), command.UpdateServiceRequest{RequestTarget: e.requestTarget(id, ptr(1)), Content: ptr("Window clean")})
		}, want: []string{"ServiceRequestDetailsUpdated"}},
		"update to the same": {run: func(id string) (command.Written, error) {
			return e.requests.UpdateDetails(t.Context(), command.UpdateServiceRequest{RequestTarget: e.requestTarget(id, nil), Content: ptr(" Deep clean "),
				CatalogItemID: &e.item})
		}},
		"update to an unknown catalog item": {run: func(id string) (command.Written, error) {
			return e.requests.UpdateDetails(t.Context(), command.UpdateServiceRequest{RequestTarget: e.requestTarget(id, nil), CatalogItemID: ptr(uuid.New())})
		}, check: func(t *testing.T, err error) { requireField(t, err, "catalog_item_id") }},
		"confirm": {run: func(id string) (command.Written, error) {
			return e.requests.ChangeStatus(t.Context(), command.ChangeServiceRequestStatus{RequestTarget: e.requestTarget(id, nil), Status: "confirmed"})
		}, want: []string{"ServiceRequestStatusChanged"}},
		"to the same status": {run: func(id string) (command.Written, error) {
			return e.requests.ChangeStatus(t.Context(), command.ChangeServiceRequestStatus{RequestTarget: e.requestTarget(id, nil), Status: "new"})
		}},
		"unknown status": {run: func(id string) (command.Written, error) {
			return e.requests.ChangeStatus(t.Context(), command.ChangeServiceRequestStatus{RequestTarget: e.requestTarget(id, nil), Status: "lost"})
		}, check: func(t *testing.T, err error) { requireField(t, err, "status") }},
		"converted through status": {run: func(id string) (command.Written, error) {
			return e.requests.ChangeStatus(t.Context(), command.ChangeServiceRequestStatus{RequestTarget: e.requestTarget(id, nil), Status: "converted"})
		}, check: func(t *testing.T, err error) { requireRule(t, err, "service_request.convert_via_endpoint") }},
		"convert a new request": {run: func(id string) (command.Written, error) {
			return e.requests.Convert(t.Context(), e.requestTarget(id, nil))
		}, check: func(t *testing.T, err error) { requireRule(t, err, "service_request.not_confirmed") }},
		"stale version": {run: func(id string) (command.Written, error) {
			return e.requests.ChangeStatus(t.Context(), command.ChangeServiceRequestStatus{RequestTarget: e.requestTarget(id, ptr(3)), Status: "confirmed"})
		}, check: func(t *testing.T, err error) { requireVersion(t, err, 3, 1) }},
		"unknown request": {run: func(string) (command.Written, error) {
			return e.requests.Convert(t.Context(), e.requestTarget(uuid.New(), nil))
		}, check: func(t *testing.T, err error) { require.ErrorIs(t, err, apperr.ErrNotFound) }},
		"an order's id": {run: func(string) (command.Written, error) {
			return e.requests.Convert(t.Context(), e.requestTarget(anOrder, nil))
		}, check: func(t *testing.T, err error) { require.ErrorIs(t, err, apperr.ErrNotFound) }},
	} {
		t.Run(name, func(t *testing.T) {
			id := e.createRequest(t)
			before := e.tx.Position()
			w, err := tc.run(id)
			if tc.check != nil {
				tc.check(t, err)
				e.unchanged(t, before)
				return
			}
			require.NoError(t, err)
			require.Equal(t, len(tc.want), w.Appended)
			require.Equal(t, append([]string{"ServiceRequestCreated"}, tc.want...), e.tx.Types(id))
			require.Equal(t, before+int64(len(tc.want)), e.tx.Position())
		})
	}
}

// Convert is a flow: the confirmed request records the order it became and
// the order is created from it (customer, window, notes, the catalog
// item's price), in one transaction; a second conversion fails and appends
// nothing.
func TestConvertServiceRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.createRequest(t)
	_, err := e.requests.ChangeStatus(t.Context(), command.ChangeServiceRequestStatus{RequestTarget: e.requestTarget(id, nil), Status: "confirmed"})
	require.NoError(t, err)

	before := e.tx.Position()
	w, err := e.requests.Convert(t.Context(), e.requestTarget(id, ptr(2)))
	require.NoError(t, err)
	require.Equal(t, before+2, e.tx.Position(), "one event in each stream")
	orderID := w.Stream[0].StreamID
	require.Equal(t, order.StreamType, w.Stream[0].StreamType, "the answer is the order")
	start := t0.Add(24 * time.Hour)
	end := start.Add(2 * time.Hour)
	require.Equal(t, order.Created{OrderID: orderID, RequestID: id, CustomerID: e.customer, AmountCents: price, Notes: "ring twice",
		ScheduledStartAt: &start, ScheduledEndAt: &end, Status: order.StatusPending}, w.Stream[0].Event)
	require.Equal(t, []string{"ServiceRequestCreated", "ServiceRequestStatusChanged", "ServiceRequestConverted"}, e.tx.Types(id))
	require.Equal(t, servicerequest.Converted{OrderID: orderID}, e.tx.Stream(id)[2].Event)

	before = e.tx.Position()
	_, err = e.requests.Convert(t.Context(), e.requestTarget(id, nil))
	requireRule(t, err, "service_request.not_confirmed")
	e.unchanged(t, before)

	// A stale version converts nothing either.
	other := e.createRequest(t)
	_, err = e.requests.ChangeStatus(t.Context(), command.ChangeServiceRequestStatus{RequestTarget: e.requestTarget(other, nil), Status: "confirmed"})
	require.NoError(t, err)
	before = e.tx.Position()
	_, err = e.requests.Convert(t.Context(), e.requestTarget(other, ptr(1)))
	requireVersion(t, err, 1, 2)
	e.unchanged(t, before)
}
