package httpport

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/access"
	"hearth/app/ops"
	"hearth/app/query"
	"hearth/domain/apperr"
)

// fakeOperator answers the admin routes and keeps what it was asked.
type fakeOperator struct {
	calls []string
	skip  ops.Skip
	spec  access.KeySpec
}

func (f *fakeOperator) note(call string) { f.calls = append(f.calls, call) }

func (f *fakeOperator) ListParked(_ context.Context, projection string) ([]ops.ParkedAggregate, error) {
	f.note("list " + projection)
	return []ops.ParkedAggregate{{Projection: "orders", StreamID: "s1", Waiting: 2}}, nil
}
func (f *fakeOperator) GetParked(_ context.Context, projection, streamID string) (ops.ParkedAggregate, error) {
	return ops.ParkedAggregate{}, apperr.ErrNotFound
}
func (f *fakeOperator) IsParked(context.Context, string, string, string) (ops.ParkedAggregate, bool, error) {
	return ops.ParkedAggregate{}, false, nil
}
func (f *fakeOperator) Replay(_ context.Context, projection, streamID, actor string) (ops.ReplayResult, error) {
	f.note("replay " + projection + "/" + streamID + " by " + actor)
	return ops.ReplayResult{Projection: projection, StreamID: streamID, Applied: 2, Unparked: true}, nil
}
func (f *fakeOperator) ReplayAll(_ context.Context, projection, actor string) ([]ops.ReplayResult, error) {
	f.note("replay all " + projection + " by " + actor)
	return []ops.ReplayResult{}, nil
}
func (f *fakeOperator) Skip(_ context.Context, s ops.Skip) (ops.SkipResult, error) {
	f.skip = s
	if s.Reason == "" {
		return ops.SkipResult{}, apperr.Invalid("reason", "is required")
	}
	return ops.SkipResult{Projection: s.Projection, StreamID: s.StreamID, EventID: s.EventID, SkippedBy: s.By, Reason: s.Reason, Waiting: 1}, nil
}
func (f *fakeOperator) StartRebuild(_ context.Context, projection, actor string) (ops.RebuildProgress, error) {
	f.note("start " + projection + " by " + actor)
	return ops.RebuildProgress{Projection: projection, Phase: "fold"}, nil
}
func (f *fakeOperator) RebuildStatus(string) (ops.RebuildProgress, error) {
	return ops.RebuildProgress{}, apperr.ErrNotFound
}
func (f *fakeOperator) CancelRebuild(_ context.Context, projection, actor string) (ops.RebuildProgress, error) {
	f.note("cancel " + projection + " by " + actor)
	return ops.RebuildProgress{Projection: projection, Phase: "cancelled"}, nil
}
func (f *fakeOperator) ListAuditOf(_ context.Context, _ ops.AuditFilter, p query.Page) ([]ops.AuditEntry, int, error) {
	return []ops.AuditEntry{{ID: 1, Actor: "key:4", Action: ops.ActionKeyCreate, Target: "k"}}, 1, nil
}
func (f *fakeOperator) ListKeys(context.Context, string, query.Page) ([]access.Key, int, error) {
	return []access.Key{}, 0, nil
}
func (f *fakeOperator) IssueKey(_ context.Context, spec access.KeySpec, actor string) (access.NewKey, error) {
	f.spec = spec
	f.note("issue by " + actor)
	return access.NewKey{Key: access.Key{ID: "k", Role: spec.Role}, Secret: "hk_new"}, nil
}
func (f *fakeOperator) RevokeKey(_ context.Context, id, actor string) (access.Key, error) {
	return access.Key{}, apperr.ErrNotFound
}
func (f *fakeOperator) RotateKey(_ context.Context, id string, grace time.Duration, actor string) (access.Rotation, error) {
	f.note("rotate " + id + " " + grace.String() + " by " + actor)
	return access.Rotation{NewKey: access.NewKey{Key: access.Key{ID: "k2"}, Secret: "hk_rot"}, Previous: access.Key{ID: id}}, nil
}

func newAdminHandler(t *testing.T) (http.Handler, *fakeOperator) {
	t.Helper()
	f := &fakeOperator{}
	h, err := NewHandler(Config{
		APIEnabled: true, Log: slog.New(slog.DiscardHandler),
		Auth:   keys{"admin-key": {KeyID: "4", Role: access.Admin}, "op-key": {KeyID: "1", MerchantID: "m", Role: access.Operator}},
		Parked: f, Rebuilds: f, Keys: f, Audit: f,
	})
	require.NoError(t, err)
	return h, f
}

func adminDo(h http.Handler, method, path, key, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// The admin routes call the operator's use cases as the admin key's
// principal, and answer their results as the admin API's bodies.
func TestAdminRoutesCallTheUseCases(t *testing.T) {
	t.Parallel()
	h, f := newAdminHandler(t)
	const id = "9f7a1c52-0000-4000-8000-000000000001"

	r := adminDo(h, "POST", "/admin/parked/orders/"+id+"/skip", "admin-key", `{"event_id":"e1","reason":"bad data"}`)
	require.Equal(t, http.StatusOK, r.Code, r.Body.String())
	require.Equal(t, ops.Skip{Projection: "orders", StreamID: id, EventID: "e1", By: "key:4", Reason: "bad data"}, f.skip)
	require.JSONEq(t, `{"projection":"orders","stream_id":"`+id+`","event_id":"e1","version":0,"type":"","skipped_by":"key:4","reason":"bad data","waiting":1,"unparked":false}`, r.Body.String())
	r = adminDo(h, "POST", "/admin/parked/orders/"+id+"/skip", "admin-key", `{}`)
	require.Equal(t, http.StatusUnprocessableEntity, r.Code)
	require.Contains(t, r.Body.String(), `"field":"reason"`)

	r = adminDo(h, "GET", "/admin/parked?projection=orders", "admin-key", "")
	require.Equal(t, http.StatusOK, r.Code)
	require.JSONEq(t, `{"items":[{"projection":"orders","stream_id":"s1","stream_type":"","merchant_id":"","reason":"","first_event_id":"","first_version":0,"waiting":2,"since":"0001-01-01T00:00:00Z","attempts":0,"last_attempt_at":"0001-01-01T00:00:00Z"}],"total":1}`, r.Body.String())
	require.Equal(t, http.StatusOK, adminDo(h, "POST", "/admin/parked/orders/"+id+"/replay", "admin-key", "").Code)
	require.Equal(t, http.StatusOK, adminDo(h, "POST", "/admin/parked/replay?projection=orders", "admin-key", "").Code)

	r = adminDo(h, "POST", "/admin/rebuilds/orders", "admin-key", "")
	require.Equal(t, http.StatusAccepted, r.Code)
	require.Equal(t, "/admin/rebuilds/orders", r.Header().Get("Location"))
	require.Equal(t, http.StatusOK, adminDo(h, "DELETE", "/admin/rebuilds/orders", "admin-key", "").Code)
	require.Equal(t, http.StatusNotFound, adminDo(h, "GET", "/admin/rebuilds/orders", "admin-key", "").Code)

	r = adminDo(h, "POST", "/admin/keys", "admin-key", `{"role":"operator","merchant":"acme","name":"ci"}`)
	require.Equal(t, http.StatusCreated, r.Code, r.Body.String())
	require.Equal(t, "no-store", r.Header().Get("Cache-Control"))
	require.Equal(t, access.KeySpec{MerchantName: "acme", Role: access.Operator, Name: "ci"}, f.spec)
	require.Contains(t, r.Body.String(), `"secret":"hk_new"`)
	r = adminDo(h, "POST", "/admin/keys/"+id+"/rotate", "admin-key", `{"grace":"90m"}`)
	require.Equal(t, http.StatusCreated, r.Code, r.Body.String())
	require.Contains(t, r.Body.String(), `"previous":{"id":"`+id+`"`)
	r = adminDo(h, "GET", "/admin/audit", "admin-key", "")
	require.Equal(t, http.StatusOK, r.Code)
	require.Contains(t, r.Body.String(), `"action":"key.create"`)

	require.Equal(t, []string{
		"list orders", "replay orders/" + id + " by key:4", "replay all orders by key:4",
		"start orders by key:4", "cancel orders by key:4",
		"issue by key:4", "rotate " + id + " 1h30m0s by key:4",
	}, f.calls)
	forbidden := adminDo(h, "POST", "/admin/rebuilds/orders", "op-key", "")
	require.Equal(t, http.StatusForbidden, forbidden.Code, "admin keys only")
	require.Contains(t, forbidden.Body.String(), `"an operator key may not POST /admin/rebuilds/orders"`)
}
