package httpport

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app"
	"hearth/app/access"
	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/internal/apptest"
)

// The handlers against a fake application: the real use cases on the
// in-memory store (apptest), read models and keys from maps. No database.

type keys map[string]access.Principal

func (k keys) Authenticate(_ context.Context, secret string) (access.Principal, error) {
	p, ok := k[secret]
	if !ok {
		return access.Principal{}, apperr.ErrNotFound
	}
	return p, nil
}

// rows is a read model with nothing in it.
type rows[V, F any] struct{}

func (rows[V, F]) Get(context.Context, query.Scope, string) (V, error) {
	var v V
	return v, apperr.ErrNotFound
}

func (rows[V, F]) List(context.Context, query.Scope, F, query.Page) (query.List[V], error) {
	return query.List[V]{}, nil
}

type orderRows struct {
	rows[query.Order, query.OrderFilter]
}

func (orderRows) Changes(context.Context, query.Scope, string, string) ([]query.Change, error) {
	return nil, nil
}

type noNames struct{}

func (noNames) Names(context.Context, string, query.NameKind, []string) (map[string]string, error) {
	return map[string]string{}, nil
}

type fakeApp struct {
	t                   testing.TB
	tx                  *apptest.Transactor
	h                   http.Handler
	merchant, customer  string
	staff, otherStaff   string
	op, worker, admin   string // keys
	otherWorker, opElse string // a worker of otherStaff; an operator of another merchant
}

func newFakeApp(t testing.TB) *fakeApp {
	t.Helper()
	f := &fakeApp{t: t, tx: apptest.New(), merchant: uuid.New(), customer: uuid.New(), staff: uuid.New(), otherStaff: uuid.New(),
		op: "op-key", worker: "worker-key", admin: "admin-key", otherWorker: "other-worker-key", opElse: "op-else-key"}
	f.tx.AddCustomer(f.merchant, f.customer, "Carla Customer")
	f.tx.AddStaff(f.merchant, f.staff, true)
	f.tx.AddStaff(f.merchant, f.otherStaff, true)
	var a app.Application
	var err error
	a.Commands.Orders, err = command.NewOrderHandlers(f.tx)
	require.NoError(t, err)
	a.Commands.ServiceRequests, err = command.NewServiceRequestHandlers(f.tx)
	require.NoError(t, err)
	a.Commands.Schedules, err = command.NewScheduleHandlers(f.tx)
	require.NoError(t, err)
	a.Queries.Orders, err = query.NewOrders(orderRows{}, noNames{})
	require.NoError(t, err)
	a.Queries.ServiceRequests, err = query.NewServiceRequests(rows[query.ServiceRequest, query.ServiceRequestFilter]{}, noNames{})
	require.NoError(t, err)
	a.Queries.Schedules, err = query.NewSchedules(rows[query.Schedule, query.ScheduleFilter]{}, noNames{})
	require.NoError(t, err)
	f.h, err = NewHandler(Config{
		App: a, APIEnabled: true, Log: slog.New(slog.DiscardHandler), MaxBodyBytes: 1024,
		Now: func() time.Time { return time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC) },
		Auth: keys{
			f.op:          {KeyID: "1", MerchantID: f.merchant, Role: access.Operator},
			f.worker:      {KeyID: "2", MerchantID: f.merchant, Role: access.Worker, StaffID: f.staff},
			f.otherWorker: {KeyID: "3", MerchantID: f.merchant, Role: access.Worker, StaffID: f.otherStaff},
			f.admin:       {KeyID: "4", Role: access.Admin},
			f.opElse:      {KeyID: "5", MerchantID: uuid.New(), Role: access.Operator},
		},
	})
	require.NoError(t, err)
	return f
}

type answer struct {
	*httptest.ResponseRecorder
	body map[string]any
}

// do sends a request with the key ("" for none) and headers as name,
// value pairs.
func (f *fakeApp) do(method, path, key, body string, header ...string) answer {
	f.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	a := answer{ResponseRecorder: rec}
	if rec.Body.Len() > 0 {
		require.NoError(f.t, json.Unmarshal(rec.Body.Bytes(), &a.body), rec.Body.String())
	}
	return a
}

func (f *fakeApp) createOrder() string {
	f.t.Helper()
	a := f.do("POST", "/v1/orders", f.op, `{"customer_id":"`+f.customer+`","amount_cents":1000}`)
	require.Equal(f.t, http.StatusCreated, a.Code, a.Body.String())
	return a.body["id"].(string)
}

// assign assigns the order to staff and returns its schedule's id.
func (f *fakeApp) assign(orderID, staff, start string) string {
	f.t.Helper()
	a := f.do("PUT", "/v1/orders/"+orderID+"/assignment", f.op,
		`{"staff_id":"`+staff+`","start_at":"`+start+`T09:00:00Z","end_at":"`+start+`T10:00:00Z"}`)
	require.Equal(f.t, http.StatusOK, a.Code, a.Body.String())
	var sch string
	_, err := f.tx.Run(f.t.Context(), event.Meta{MerchantID: f.merchant}, func(ctx context.Context, s command.Session) error {
		got, _, err := s.LiveSchedule(ctx, orderID)
		if got != nil {
			sch = got.ID()
		}
		return err
	})
	require.NoError(f.t, err)
	require.NotEmpty(f.t, sch)
	return sch
}

// A write answers with the resource as the command left it: Location (on
// create), ETag, Consistency-Position, and the position in the body too.
func TestWriteAnswerShape(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	a := f.do("POST", "/v1/orders", f.op, `{"customer_id":"`+strings.ToUpper(f.customer)+`","amount_cents":4200,"notes":"gate"}`)
	require.Equal(t, http.StatusCreated, a.Code, a.Body.String())
	id := a.body["id"].(string)
	require.Equal(t, []string{"OrderCreated"}, f.tx.Types(id))
	pos := strconv.FormatInt(f.tx.Position(), 10)
	require.Equal(t, "/v1/orders/"+id, a.Header().Get("Location"))
	require.Equal(t, `"1"`, a.Header().Get("ETag"))
	require.Equal(t, pos, a.Header().Get(HeaderPosition))
	require.EqualValues(t, f.tx.Position(), a.body["position"], "a JSON number, like the events' position")
	require.Equal(t, f.customer, a.body["customer_id"], "ids made canonical")
	require.Equal(t, "Carla Customer", a.body["customer_name"], "the name the command read")
	require.Equal(t, "pending", a.body["status"])
	require.EqualValues(t, 4200, a.body["amount_cents"])
	require.EqualValues(t, 1, a.body["version"])
	require.Equal(t, "2030-01-02T03:04:05Z", a.body["created_at"], "the handler's clock")

	a = f.do("POST", "/v1/orders/"+id+"/status", f.op, `{"status":"confirmed"}`, "If-Match", `"1"`)
	require.Equal(t, http.StatusOK, a.Code, a.Body.String())
	require.Empty(t, a.Header().Get("Location"))
	require.Equal(t, `"2"`, a.Header().Get("ETag"))
	require.Equal(t, strconv.FormatInt(f.tx.Position(), 10), a.Header().Get(HeaderPosition))
	require.Equal(t, "confirmed", a.body["status"])

	// A schedule's status answers with the schedule.
	sch := f.assign(id, f.staff, "2030-02-01")
	a = f.do("POST", "/v1/schedules/"+sch+"/status", f.worker, `{"status":"in_service"}`)
	require.Equal(t, http.StatusOK, a.Code, a.Body.String())
	require.Equal(t, sch, a.body["id"])
	require.Equal(t, "in_service", a.body["status"])
	require.Equal(t, `"2"`, a.Header().Get("ETag"))
}

// Input that cannot be read is 400 and names the field; nothing is
// written.
func TestDecodingErrors(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	id := f.createOrder()
	for name, tc := range map[string]struct {
		method, path, body string
		field              string // "" when the problem names none
	}{
		"wrong type":        {"POST", "/v1/orders", `{"customer_id":"x","amount_cents":"lots"}`, "amount_cents"},
		"unknown field":     {"POST", "/v1/orders", `{"customer_id":"x","colour":"red"}`, "colour"},
		"bad time":          {"POST", "/v1/orders", `{"customer_id":"x","scheduled_start_at":"tomorrow"}`, "scheduled_start_at"},
		"path id":           {"PATCH", "/v1/orders/nope", `{"notes":"x"}`, "id"},
		"version type":      {"POST", "/v1/orders/" + id + "/status", `{"status":"confirmed","expected_version":"1"}`, "expected_version"},
		"empty body":        {"POST", "/v1/orders", ``, ""},
		"malformed JSON":    {"POST", "/v1/orders", `{"customer_id":`, ""},
		"trailing data":     {"POST", "/v1/orders", `{"customer_id":"x"} {}`, ""},
		"array, not object": {"POST", "/v1/orders", `[1]`, ""},
		// encoding/json would keep the last of two names that differ in
		// case only, while the Idempotency-Key fingerprint keeps both.
		"member twice, case apart": {"POST", "/v1/orders", `{"customer_id":"x","amount_cents":1,"AMOUNT_CENTS":2}`, "AMOUNT_CENTS"},
		"member twice":             {"POST", "/v1/orders", `{"customer_id":"x","notes":"a","notes":"b"}`, "notes"},
		"day twice": {"PUT", "/v1/staff/" + f.staff + "/working-hours",
			`{"week":{"monday":[{"start":"09:00","end":"12:00"}],"Monday":[]}}`, "week.Monday"},
		"member twice, nested": {"PUT", "/v1/staff/" + f.staff + "/working-hours",
			`{"week":{"monday":[{"start":"09:00","end":"12:00"},{"start":"13:00","end":"17:00","End":"18:00"}]}}`, "week.monday[1].End"},
	} {
		t.Run(name, func(t *testing.T) {
			before := f.tx.Position()
			a := f.do(tc.method, tc.path, f.op, tc.body)
			require.Equal(t, http.StatusBadRequest, a.Code, a.Body.String())
			require.Equal(t, "application/problem+json", a.Header().Get("Content-Type"))
			typ := "/problems/malformed-request"
			if tc.field == "id" {
				typ = "/problems/invalid-id"
			}
			require.Equal(t, typ, a.body["type"])
			if tc.field != "" {
				errs, _ := a.body["errors"].([]any)
				require.Len(t, errs, 1, a.Body.String())
				require.Equal(t, tc.field, errs[0].(map[string]any)["field"])
			}
			require.Equal(t, before, f.tx.Position())
		})
	}
}

// A time that parses with its offset but lies outside the years 0001 to
// 9999 once in UTC (where RFC 3339's four digits end) is refused naming
// it (400), and nothing is written.
func TestTimesOutsideTheStoredYears(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	id := f.createOrder()
	before := f.tx.Position()
	for name, tc := range map[string]struct {
		method, path, body string
		status             int
		field              string
	}{
		"body, past 9999": {"POST", "/v1/orders", `{"customer_id":"` + f.customer + `","scheduled_start_at":"9999-12-31T23:00:00-02:00","scheduled_end_at":"9999-12-31T23:30:00-02:00"}`,
			http.StatusBadRequest, "scheduled_start_at"},
		"body, before 0001": {"PUT", "/v1/orders/" + id + "/assignment", `{"staff_id":"` + f.staff + `","start_at":"0001-01-01T00:30:00+01:00","end_at":"0001-01-01T02:00:00Z"}`,
			http.StatusBadRequest, "start_at"},
		"query": {"GET", "/v1/orders?from=9999-12-31T23:00:00-02:00", "", http.StatusBadRequest, "from"},
	} {
		t.Run(name, func(t *testing.T) {
			a := f.do(tc.method, tc.path, f.op, tc.body)
			require.Equal(t, tc.status, a.Code, a.Body.String())
			errs, _ := a.body["errors"].([]any)
			require.NotEmpty(t, errs, a.Body.String())
			require.Equal(t, tc.field, errs[0].(map[string]any)["field"], a.Body.String())
			require.Contains(t, errs[0].(map[string]any)["message"], "between the years 0001 and 9999")
			require.Equal(t, before, f.tx.Position())
		})
	}
}

// Application errors map to their problems.
func TestProblemMapping(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	id := f.createOrder()
	booked := f.createOrder()
	sch := f.assign(booked, f.staff, "2030-03-01")
	big := `{"notes":"` + strings.Repeat("a", 2000) + `"}`
	for name, tc := range map[string]struct {
		method, path, body string
		header             []string
		status             int
		typ                string
		check              func(t *testing.T, a answer)
	}{
		"unknown order": {"POST", "/v1/orders/" + uuid.New() + "/status", `{"status":"confirmed"}`, nil,
			404, "/problems/not-found", nil},
		"another merchant's order": {"POST", "/v1/orders/" + id + "/status", `{"status":"confirmed"}`, []string{"Authorization", "Bearer " + f.opElse},
			404, "/problems/not-found", nil},
		"stale expected_version": {"POST", "/v1/orders/" + id + "/status", `{"status":"confirmed","expected_version":7}`, nil,
			409, "/problems/conflict", func(t *testing.T, a answer) { require.Contains(t, a.body["detail"], "version 1, not 7") }},
		"stale If-Match": {"POST", "/v1/orders/" + id + "/status", `{"status":"confirmed"}`, []string{"If-Match", `"7"`},
			412, "/problems/precondition-failed", func(t *testing.T, a answer) { require.Equal(t, `"1"`, a.Header().Get("ETag")) }},
		// If-Match: * states no version (any current one matches), so the
		// body's expected_version is the only one stated: stale, it is the
		// conflict it is without the header, not a failed precondition.
		"If-Match * with a stale expected_version": {"POST", "/v1/orders/" + id + "/status", `{"status":"confirmed","expected_version":7}`, []string{"If-Match", "*"},
			409, "/problems/conflict", func(t *testing.T, a answer) {
				require.Contains(t, a.body["detail"], "version 1, not 7")
				require.Empty(t, a.Header().Get("ETag"), "the tag is a 412's")
			}},
		"If-Match and expected_version, both stale": {"POST", "/v1/orders/" + id + "/status", `{"status":"confirmed","expected_version":7}`, []string{"If-Match", `"7"`},
			412, "/problems/precondition-failed", func(t *testing.T, a answer) { require.Equal(t, `"1"`, a.Header().Get("ETag")) }},
		"rule": {"POST", "/v1/orders/" + id + "/status", `{"status":"cancelled"}`, nil,
			422, "/problems/rule-broken", func(t *testing.T, a answer) { require.Equal(t, "order.cancel_needs_reason", a.body["rule"]) }},
		"transition": {"POST", "/v1/orders/" + id + "/status", `{"status":"completed"}`, nil,
			422, "/problems/rule-broken", func(t *testing.T, a answer) { require.Equal(t, "order.invalid_transition", a.body["rule"]) }},
		"validation": {"PATCH", "/v1/orders/" + id, `{"customer_id":"` + uuid.New() + `","amount_cents":-1}`, nil,
			422, "/problems/validation-failed", func(t *testing.T, a answer) {
				errs := a.body["errors"].([]any)
				require.Equal(t, "customer_id", errs[0].(map[string]any)["field"])
			}},
		"double booking": {"PUT", "/v1/orders/" + id + "/assignment",
			`{"staff_id":"` + f.staff + `","start_at":"2030-03-01T09:30:00Z","end_at":"2030-03-01T11:00:00Z"}`, nil,
			409, "/problems/conflict", func(t *testing.T, a answer) { require.Equal(t, sch, a.body["conflicting_schedule_id"]) }},
		"body too large": {"PATCH", "/v1/orders/" + id, big, nil, 413, "/problems/body-too-large", nil},
	} {
		t.Run(name, func(t *testing.T) {
			before := f.tx.Position()
			key := f.op
			if len(tc.header) > 0 && tc.header[0] == "Authorization" {
				key, tc.header = strings.TrimPrefix(tc.header[1], "Bearer "), nil
			}
			a := f.do(tc.method, tc.path, key, tc.body, tc.header...)
			require.Equal(t, tc.status, a.Code, a.Body.String())
			require.Equal(t, tc.typ, a.body["type"])
			require.EqualValues(t, tc.status, a.body["status"])
			if tc.check != nil {
				tc.check(t, a)
			}
			require.Equal(t, before, f.tx.Position(), "nothing written")
		})
	}
}

// Keys and roles: no key or an unknown one is 401, a role the route does
// not admit 403; a worker moves only its own schedules (another's is not
// found) and may not cancel them.
func TestAuthRoles(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	id := f.createOrder()
	sch := f.assign(id, f.staff, "2030-04-01")
	order := `{"customer_id":"` + f.customer + `"}`
	for name, tc := range map[string]struct {
		method, path, key, body string
		status                  int
	}{
		"no key":                  {"POST", "/v1/orders", "", order, 401},
		"unknown key":             {"POST", "/v1/orders", "guess", order, 401},
		"worker creates an order": {"POST", "/v1/orders", f.worker, order, 403},
		"admin creates an order":  {"POST", "/v1/orders", f.admin, order, 403},
		"worker lists orders":     {"GET", "/v1/orders", f.worker, "", 200},
		"operator lists keys":     {"GET", "/admin/keys", f.op, "", 403},
		"another worker":          {"POST", "/v1/schedules/" + sch + "/status", f.otherWorker, `{"status":"in_service"}`, 404},
		"worker cancels":          {"POST", "/v1/schedules/" + sch + "/status", f.worker, `{"status":"cancelled"}`, 403},
	} {
		t.Run(name, func(t *testing.T) {
			before := f.tx.Position()
			a := f.do(tc.method, tc.path, tc.key, tc.body)
			require.Equal(t, tc.status, a.Code, a.Body.String())
			if tc.status == 401 {
				require.Contains(t, a.Header().Get("WWW-Authenticate"), "Bearer")
			}
			require.Equal(t, before, f.tx.Position(), "nothing written")
		})
	}
}
