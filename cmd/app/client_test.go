package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	googleuuid "github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"hearth/client"
)

// The end-to-end tests that speak to Hearth through its generated Go client
// (client/, from the OpenAPI document) send and read what an integrator's
// Go program would, typed by the document. Every answer they check is also
// decoded strictly into the document's type for its status, so a field the
// server answers and the document does not declare fails them.

// answer is what every answer of the generated client has.
type answer interface {
	StatusCode() int
	GetBody() []byte
}

// as authenticates one call of the generated client with key.
func as(key string) client.RequestEditorFn { return client.Bearer(key) }

// uid is an id the tests hold as a string, typed for the generated client.
func uid(t *testing.T, id string) client.Id {
	t.Helper()
	u, err := googleuuid.Parse(id)
	require.NoError(t, err)
	return u
}

// instant parses an RFC 3339 time written in a test.
func instant(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, s)
	require.NoError(t, err)
	return at
}

// expect requires a generated client's answer to have status and to be the
// JSON the document declares for it: its typed field (JSON201,
// ApplicationproblemJSON422, ...) is set, and the body decodes into that
// type with no unknown field.
func expect[R answer](t *testing.T, status int, r R, err error) R {
	t.Helper()
	require.NoError(t, err)
	body := r.GetBody()
	require.Equal(t, status, r.StatusCode(), "%s", body)
	v := reflect.ValueOf(r).Elem()
	field := v.FieldByName(fmt.Sprintf("JSON%d", status))
	if !field.IsValid() {
		field = v.FieldByName(fmt.Sprintf("ApplicationproblemJSON%d", status))
	}
	require.True(t, field.IsValid(), "the document declares a JSON answer %d for %T", status, r)
	require.False(t, field.IsNil(), "the answer is the document's %s: %s", field.Type(), body)
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(reflect.New(field.Type().Elem()).Interface()),
		"every field the server answered is in the document's %s", field.Type())
	return r
}

// problemOf requires a problem answer with status and type and returns it
// as the document's Problem.
func problemOf[R answer](t *testing.T, status int, typ string, r R, err error) *client.Problem {
	t.Helper()
	expect(t, status, r, err)
	p := reflect.ValueOf(r).Elem().FieldByName(fmt.Sprintf("ApplicationproblemJSON%d", status)).Interface().(*client.Problem)
	require.Equal(t, client.ProblemType(typ), p.Type, "%s", r.GetBody())
	require.Equal(t, status, p.Status)
	require.NotEmpty(t, p.Detail)
	return p
}

// fieldsOf lists the fields a problem names.
func fieldsOf(p *client.Problem) []string {
	var fields []string
	if p.Errors != nil {
		for _, e := range *p.Errors {
			fields = append(fields, e.Field)
		}
	}
	return fields
}

// fieldsMap is a typed answer as the JSON object it was, for comparing a
// write's answer with a read of another type (requireShows).
func fieldsMap(t *testing.T, v any) map[string]any {
	t.Helper()
	buf, err := json.Marshal(v)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(buf, &m))
	return m
}

// awaitAt polls a GET of the generated client until the read model shows
// version (the projections follow the writes) and returns that read.
func awaitAt[R answer, V any](t *testing.T, what string, version int, get func() (R, error), read func(R) *V, versionOf func(*V) int) *V {
	t.Helper()
	assert.Eventually(t, func() bool {
		r, err := get()
		return err == nil && read(r) != nil && versionOf(read(r)) >= version
	}, 10*time.Second, 10*time.Millisecond, "the read model never showed %s at version %d", what, version)
	r, err := get()
	got := read(expect(t, http.StatusOK, r, err))
	require.Equal(t, version, versionOf(got), what)
	return got
}

// awaitOrderAt waits until the read model shows the order at version.
func (a *api) awaitOrderAt(key, id string, version int) *client.Order {
	a.t.Helper()
	return awaitAt(a.t, "order "+id, version, func() (*client.GetOrderResponse, error) {
		return a.hearth().GetOrderWithResponse(a.t.Context(), uid(a.t, id), nil, as(key))
	}, func(r *client.GetOrderResponse) *client.Order { return r.JSON200 }, func(o *client.Order) int { return o.Version })
}

// awaitRequestAt waits until the read model shows the service request at
// version.
func (a *api) awaitRequestAt(key, id string, version int) *client.ServiceRequest {
	a.t.Helper()
	return awaitAt(a.t, "service request "+id, version, func() (*client.GetServiceRequestResponse, error) {
		return a.hearth().GetServiceRequestWithResponse(a.t.Context(), uid(a.t, id), nil, as(key))
	}, func(r *client.GetServiceRequestResponse) *client.ServiceRequest { return r.JSON200 },
		func(s *client.ServiceRequest) int { return s.Version })
}

// liveSchedule waits for the live (planned or in service) schedule of an
// order in the schedules list and returns it.
func (a *api) liveSchedule(key, orderID string) client.Schedule {
	a.t.Helper()
	var found client.Schedule
	require.Eventually(a.t, func() bool {
		r, err := a.hearth().ListSchedulesWithResponse(a.t.Context(), &client.ListSchedulesParams{PageSize: new(200)}, as(key))
		if err != nil || r.JSON200 == nil {
			return false
		}
		for _, s := range r.JSON200.Items {
			if s.OrderId.String() == orderID && (s.Status == client.ScheduleStatusPlanned || s.Status == client.ScheduleStatusInService) {
				found = s
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "order %s never had a live schedule", orderID)
	return found
}

// listed pages through a list with the generated client: list returns one
// page (page, pageSize) and its answer. It returns every item's id in order,
// checking that total stays the same, the pages hold it and no id repeats.
func listed[R answer](t *testing.T, pageSize int, list func(page, pageSize int) (R, error), ids func(R) ([]string, int)) ([]string, int) {
	t.Helper()
	var all []string
	seen := map[string]bool{}
	total := -1
	for page := 1; ; page++ {
		r, err := list(page, pageSize)
		expect(t, http.StatusOK, r, err)
		pageIDs, pageTotal := ids(r)
		if total < 0 {
			total = pageTotal
		}
		require.Equal(t, total, pageTotal, "total is the same on every page")
		for _, id := range pageIDs {
			require.False(t, seen[id], "%s on two pages", id)
			seen[id] = true
		}
		all = append(all, pageIDs...)
		if len(pageIDs) < pageSize {
			require.Equal(t, total, len(all), "the pages hold total rows")
			return all, total
		}
	}
}

// rawField is one field of a JSON answer as it was on the wire (a time's
// text, a null), which the typed answer no longer tells.
func rawField(t *testing.T, body []byte, name string) any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m))
	require.Contains(t, m, name)
	return m[name]
}

// requireRule requires a 422 rule-broken answer naming rule.
func requireRule(t *testing.T, rule string, r answer, err error) {
	t.Helper()
	p := problemOf(t, http.StatusUnprocessableEntity, "/problems/rule-broken", r, err)
	require.NotNil(t, p.Rule, "%s", r.GetBody())
	require.Equal(t, rule, *p.Rule, "%s", r.GetBody())
}
