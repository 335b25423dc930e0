package servicerequest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/apperr"
	"hearth/domain/servicerequest"
	"hearth/domain/uuid"
)

func newRequest(t *testing.T) *servicerequest.Request {
	t.Helper()
	r, err := servicerequest.New(uuid.New(), uuid.New(), "phone", servicerequest.Details{Content: "  Fix the sink  "})
	require.NoError(t, err)
	require.Equal(t, "Fix the sink", r.Details().Content, "content is trimmed")
	r, err = servicerequest.Rehydrate(r.Changes())
	require.NoError(t, err)
	return r
}

func fieldsOf(t *testing.T, err error) map[string]bool {
	t.Helper()
	var v *apperr.ValidationError
	require.ErrorAs(t, err, &v)
	out := map[string]bool{}
	for _, f := range v.Fields {
		out[f.Field] = true
	}
	return out
}

func TestNewValidates(t *testing.T) {
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	early := start.Add(-time.Hour)
	_, err := servicerequest.New(uuid.New(), "", "fax", servicerequest.Details{
		Content: "   ", CatalogItemID: "nope", AppointmentStartAt: &start, AppointmentEndAt: &early,
	})
	require.Equal(t, map[string]bool{"customer_id": true, "source": true, "content": true,
		"catalog_item_id": true, "appointment_end_at": true}, fieldsOf(t, err))

	_, err = servicerequest.New(uuid.New(), uuid.New(), "web", servicerequest.Details{Content: strings.Repeat("é", servicerequest.MaxContent+1)})
	require.Equal(t, map[string]bool{"content": true}, fieldsOf(t, err))

	_, err = servicerequest.New(uuid.New(), uuid.New(), "web", servicerequest.Details{Content: "a\x00b", Notes: "c\x01"})
	require.Equal(t, map[string]bool{"content": true, "notes": true}, fieldsOf(t, err), "control characters")
	_, err = servicerequest.New(uuid.New(), uuid.New(), "web", servicerequest.Details{Content: "line one\n\tline two", Notes: "a\r\nb"})
	require.NoError(t, err, "multi-line text")
}

func TestLifeCycle(t *testing.T) {
	r := newRequest(t)
	require.ErrorAs(t, r.Convert(uuid.New()), new(*apperr.RuleError), "only confirmed requests convert")
	require.NoError(t, r.ChangeStatus(servicerequest.StatusConfirmed))
	require.NoError(t, r.ChangeStatus(servicerequest.StatusConfirmed), "same status: no-op")
	require.Len(t, r.Changes(), 1)
	require.NoError(t, r.Convert(uuid.New()))
	require.Equal(t, servicerequest.StatusConverted, r.Status())

	require.ErrorAs(t, r.ChangeStatus(servicerequest.StatusCancelled), new(*servicerequest.InvalidTransitionError), "converted is final")
	d := r.Details()
	d.Content = "changed"
	var rule *apperr.RuleError
	require.ErrorAs(t, r.UpdateDetails(d), &rule)
	require.Equal(t, "service_request.final", rule.Rule)

	c := newRequest(t)
	require.NoError(t, c.ChangeStatus(servicerequest.StatusCancelled))
	require.ErrorAs(t, c.ChangeStatus(servicerequest.StatusConfirmed), new(*servicerequest.InvalidTransitionError))
	require.ErrorAs(t, newRequest(t).ChangeStatus(servicerequest.StatusConverted), &rule)
	require.Equal(t, "service_request.convert_via_endpoint", rule.Rule)
}
