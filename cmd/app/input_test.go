package main

import (
	"encoding/base64"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/domain/uuid"
	"hearth/internal/pgtest"
)

// The example: a NUL in a PATCH answered 500 (Postgres cannot store
// it). It is a 422 naming the field, and nothing is written.
func TestControlCharacterInPatch(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	r := a.do(http.MethodPatch, "/v1/customers/"+customer, a.opA, `{"name":"a\u0000b"}`)
	requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
	require.Equal(t, []string{"name"}, problemFields(r))
	require.Equal(t, "Ada", a.must(http.StatusOK, http.MethodGet, "/v1/customers/"+customer, a.opA, nil).Body["name"])

	order := a.createOrder(a.opA, customer, 100)
	r = a.do(http.MethodPatch, "/v1/orders/"+order, a.opA, `{"notes":"a\u0000b"}`)
	requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
	require.Equal(t, []string{"notes"}, problemFields(r))
	require.Equal(t, 1, a.events(order), "nothing appended")
}

// Every text field of every request body: a control character answers 422
// naming the field. Multi-line fields (address, notes, content, reason,
// dispatch_note, settlement_note) take tab, line feed and carriage return;
// the others take none. Invalid UTF-8 is refused the same way, and a
// search text in a query is a 400.
func TestControlCharactersInEveryField(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	item := a.must(http.StatusCreated, http.MethodPost, "/v1/catalog-items", a.opA, map[string]any{"name": "Sink repair"}).Body["id"].(string)
	order := a.createOrder(a.opA, customer, 100)
	const start, end = "2030-06-01T09:00:00Z", "2030-06-01T10:00:00Z"

	type body = map[string]any
	cases := []struct {
		method, path string
		key          string
		valid        func() body // a body that is accepted (fresh each time)
		lines        []string    // one-line text fields
		multiline    []string    // multi-line text fields
	}{
		{http.MethodPost, "/v1/customers", a.opA, func() body { return body{"name": "Bo"} },
			[]string{"name", "phone", "email"}, []string{"address", "notes"}},
		{http.MethodPatch, "/v1/customers/" + customer, a.opA, func() body { return body{} },
			[]string{"name", "phone", "email"}, []string{"address", "notes"}},
		{http.MethodPost, "/v1/staff", a.opA, func() body { return body{"name": "Wu"} }, []string{"name", "phone"}, nil},
		{http.MethodPost, "/v1/catalog-items", a.opA, func() body { return body{"name": "Drain"} }, []string{"name"}, nil},
		{http.MethodPost, "/v1/orders", a.opA, func() body { return body{"customer_id": customer, "amount_cents": 1} },
			[]string{"customer_id", "request_id"}, []string{"notes"}},
		{http.MethodPatch, "/v1/orders/" + order, a.opA, func() body { return body{} }, []string{"customer_id"}, []string{"notes"}},
		{http.MethodPost, "/v1/orders/" + order + "/status", a.opA, func() body { return body{"status": "pending"} }, []string{"status"}, nil},
		{http.MethodPut, "/v1/orders/" + order + "/settlement", a.opA,
			func() body { return body{"settlement_status": "unsettled", "payment_method": "cash"} },
			[]string{"settlement_status", "payment_method"}, []string{"settlement_note"}},
		{http.MethodPut, "/v1/orders/" + order + "/assignment", a.opA,
			func() body { return body{"staff_id": a.staffA, "start_at": start, "end_at": end} },
			[]string{"staff_id"}, []string{"dispatch_note"}},
		{http.MethodPost, "/v1/service-requests", a.opA,
			func() body { return body{"customer_id": customer, "content": "Fix it", "catalog_item_id": item} },
			[]string{"customer_id", "catalog_item_id", "source"}, []string{"content", "notes"}},
		{http.MethodPost, "/v1/orders/" + order + "/cancel", a.opA, func() body { return body{"reason": "moved"} }, nil, []string{"reason"}},
		{http.MethodPost, "/admin/parked/orders/" + order + "/skip", a.admin,
			func() body { return body{"event_id": uuid.New(), "reason": "bad"} }, []string{"event_id"}, []string{"reason"}},
	}
	for _, c := range cases {
		refused := map[string][]string{} // field -> values it must refuse
		for _, f := range c.lines {
			refused[f] = []string{"x\u0000y", "x\ny", "x\u001by", "x\u0085y"}
		}
		for _, f := range c.multiline {
			refused[f] = []string{"x\u0000y", "x\u0007y", "x\u007fy"}
		}
		for field, values := range refused {
			for _, v := range values {
				b := c.valid()
				b[field] = v
				r := a.do(c.method, c.path, c.key, b)
				requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
				require.Equal(t, []string{field}, problemFields(r), "%s %s %s=%q: %s", c.method, c.path, field, v, r)
				require.Contains(t, r.Raw, "control characters")
			}
			// Invalid UTF-8: a raw body, which encoding/json would have mended.
			b := c.valid()
			b[field] = "MARK"
			raw := strings.Replace(string(jsonOf(t, b)), "MARK", "x\xffy", 1)
			r := a.do(c.method, c.path, c.key, raw)
			requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
			require.Equal(t, []string{field}, problemFields(r), "%s %s %s: invalid UTF-8: %s", c.method, c.path, field, r)
			require.Contains(t, r.Raw, "UTF-8")
		}
	}

	// Line breaks and tabs where a text has lines.
	created := a.must(http.StatusCreated, http.MethodPost, "/v1/customers", a.opA,
		map[string]any{"name": "Cy", "address": "1 Main St\r\nSpringfield", "notes": "gate code:\t42\nback door"})
	require.Equal(t, "1 Main St\r\nSpringfield", created.Body["address"])
	require.Equal(t, "gate code:\t42\nback door", created.Body["notes"])
	a.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+order, a.opA, map[string]any{"notes": "one\ntwo"})

	r := a.do(http.MethodGet, "/v1/customers?q=a%00b", a.opA, nil)
	requireProblem(t, r, http.StatusBadRequest, "/problems/malformed-request")
	require.Equal(t, []string{"q"}, problemFields(r))
}

// An id is stored in its canonical lower-case form whatever case the client
// sent, in a body or a query, so it is found, named and compared as one.
func TestCanonicalIDs(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	item := a.must(http.StatusCreated, http.MethodPost, "/v1/catalog-items", a.opA, map[string]any{"name": "Sink repair"}).Body["id"].(string)
	up := strings.ToUpper
	sr := a.must(http.StatusCreated, http.MethodPost, "/v1/service-requests", a.opA,
		map[string]any{"customer_id": up(customer), "catalog_item_id": up(item), "content": "Fix the sink"})
	require.Equal(t, customer, sr.Body["customer_id"])
	require.Equal(t, item, sr.Body["catalog_item_id"])
	requireStoredIDs(t, a, sr.Body["id"].(string), map[string]string{"customer_id": customer, "catalog_item_id": item})
	requestID := sr.Body["id"].(string)

	created := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA,
		map[string]any{"customer_id": up(customer), "amount_cents": 100, "request_id": up(requestID)})
	order := created.Body["id"].(string)
	require.Equal(t, customer, created.Body["customer_id"])
	require.Equal(t, "Ada Lovelace", created.Body["customer_name"], "named: the names are keyed by the canonical id")
	require.Equal(t, requestID, created.Body["request_id"])
	requireStoredIDs(t, a, order, map[string]string{"customer_id": customer, "request_id": requestID})

	assigned := a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+up(order)+"/assignment", a.opA,
		map[string]any{"staff_id": up(a.staffA), "start_at": "2030-06-01T09:00:00Z", "end_at": "2030-06-01T10:00:00Z"})
	require.Equal(t, a.staffA, assigned.Body["staff_id"])
	require.Equal(t, "Wanda Worker", assigned.Body["staff_name"])
	requireStoredIDs(t, a, order, map[string]string{"staff_id": a.staffA})
	// The worker bound to the staff member sees the schedule: its staff id
	// compares equal to the key's.
	schedule := a.crmSchedule(a.worker, order)
	require.Equal(t, a.staffA, schedule.Body["staff_id"])

	// The ids of a list too: one id in two cases is one id.
	hours := a.must(http.StatusOK, http.MethodPut, "/v1/staff/"+a.staffA+"/working-hours", a.opA,
		map[string]any{"week": map[string]any{}, "catalog_item_ids": []string{up(item), item}})
	require.Equal(t, []any{item}, hours.Body["catalog_item_ids"])

	// Filters in any case find them.
	a.awaitOrder(a.opA, order, 3)
	for _, path := range []string{"/v1/orders?customer_id=" + up(customer), "/v1/orders?staff_id=" + up(a.staffA)} {
		ids, _ := a.crmAll(a.opA, path, 10)
		require.Equal(t, []string{order}, ids, path)
	}
}

// requireStoredIDs checks the ids in the data of the stream's events as
// stored: each field, wherever an event has it, in canonical form.
func requireStoredIDs(t *testing.T, a *api, streamID string, want map[string]string) {
	t.Helper()
	for field, id := range want {
		var n, canonical int
		require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `
			SELECT count(*), count(*) FILTER (WHERE data->>$2 = $3) FROM events
			WHERE stream_id = $1 AND data ? $2`, streamID, field, id).Scan(&n, &canonical))
		require.NotZero(t, n, "an event of %s has %s", streamID, field)
		require.Equal(t, n, canonical, "%s stored as %s", field, id)
	}
}

func jsonOf(t *testing.T, v map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// a body whose object is followed by '}' or ']' makes the
// repeated-member scan panic; the API answers 500 /problems/internal (and
// logs a handler panic with its stack) where docs/api.md promises 400
// /problems/malformed-request for "JSON that does not parse".
func TestDataAfterTheBodysObjectIsMalformed(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	order := a.createOrder(a.opA, customer, 100)
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/customers", `{"name":"Bo"}}`},
		{http.MethodPost, "/v1/orders", `{"customer_id":"` + customer + `","amount_cents":1}]`},
		{http.MethodPatch, "/v1/orders/" + order, `{"notes":"x"} }`},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			before := a.events("")
			r := a.do(c.method, c.path, a.opA, c.body)
			require.Equal(t, before, a.events(""), "%s %s: nothing written", c.method, c.path)
			requireProblem(t, r, http.StatusBadRequest, "/problems/malformed-request")
		})
	}
}

// a list cursor is decoded but its time is not checked
// against the range Postgres takes; a cursor naming the year 0 (or a time
// that is the year 0 once in UTC) reaches the query and answers 500, where
// docs/api.md says a bad query parameter is 400 naming it.
func TestAListCursorOfATimeOutOfRangeIsRefused(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	cursor := func(at string) string {
		return base64.RawURLEncoding.EncodeToString([]byte(`{"o":"created_at","t":"` + at + `","i":"00000000-0000-0000-0000-000000000000"}`))
	}
	for _, at := range []string{"0000-01-01T00:00:00Z", "0001-01-01T00:30:00+01:00"} {
		for _, list := range []string{"/v1/orders", "/v1/customers", "/v1/schedules", "/v1/service-requests"} {
			t.Run(list+" "+at, func(t *testing.T) {
				r := a.do(http.MethodGet, list+"?page_size=5&cursor="+cursor(at), a.opA, nil)
				requireProblem(t, r, http.StatusBadRequest, "/problems/malformed-request")
				require.Equal(t, []string{"cursor"}, problemFields(r), "%s %s: %s", list, at, r)
			})
		}
	}
}

// A list's time range [from, to) that runs backwards, or is empty, is
// refused naming to, as the plan visits' and the availability's are: a
// client that swapped the two, or gave one instant for both, meant a
// range, and an empty 200 reads as "nothing scheduled then".
func TestAListTimeRangeThatIsEmptyIsRefused(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	for _, list := range []string{"/v1/orders", "/v1/schedules", "/v1/service-requests"} {
		for _, q := range []string{"from=2030-02-01T00:00:00Z&to=2030-01-01T00:00:00Z", "from=2030-01-01T01:00:00%2B01:00&to=2030-01-01T00:00:00Z"} {
			t.Run(list+"?"+q, func(t *testing.T) {
				r := a.do(http.MethodGet, list+"?"+q, a.opA, nil)
				requireProblem(t, r, http.StatusBadRequest, "/problems/malformed-request")
				require.Equal(t, []string{"to"}, problemFields(r), "%s", r)
			})
		}
		a.must(http.StatusOK, http.MethodGet, list+"?from=2030-01-01T00:00:00Z&to=2030-01-01T00:00:00.000001Z", a.opA, nil)
	}
}

// "\ud800" (a lone surrogate, not Unicode text) is
// stored as U+FFFD: the record holds something else than what the client
// sent, and nothing says so.
func TestALoneSurrogateIsRefusedNotReplaced(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	r := a.do(http.MethodPost, "/v1/customers", a.opA, `{"name":"Ada \ud800 Lovelace"}`)
	require.NotEqual(t, http.StatusCreated, r.Status, "stored as %q", r.Body["name"])
	requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
	require.Equal(t, []string{"name"}, problemFields(r))
}

// a list's one-value filters given twice are read
// silently: customer_id, staff_id, from, to, page_size and cursor take the
// first value, settlement_status the last. A client asking for two
// customers' orders gets one customer's, complete-looking. The event feed
// refuses the same thing ("must be given at most once").
func TestAOneValueListParameterGivenTwiceIsRefused(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ada, bo := a.createCustomer(a.opA, "Ada"), a.createCustomer(a.opA, "Bo")
	o1, o2 := a.createOrder(a.opA, ada, 100), a.createOrder(a.opA, bo, 200)
	a.awaitOrder(a.opA, o1, 1)
	a.awaitOrder(a.opA, o2, 1)
	for name, query := range map[string]string{
		"customer_id":       "customer_id=" + ada + "&customer_id=" + bo,
		"settlement_status": "settlement_status=settled&settlement_status=unsettled",
		"page_size":         "page_size=1&page_size=200",
	} {
		t.Run(name, func(t *testing.T) {
			r := a.do(http.MethodGet, "/v1/orders?"+query, a.opA, nil)
			requireProblem(t, r, http.StatusBadRequest, "/problems/malformed-request")
			require.Equal(t, []string{name}, problemFields(r), "%s: %s", query, r)
		})
	}
}

// the routes whose body is optional (convert, a plan's
// pause/resume/end, key rotation, secret rotation) skip decoding only when
// Content-Length is 0. An empty body sent chunked (Content-Length unknown,
// as clients streaming a body do) is decoded and refused: 400 "request
// body is empty; a JSON object is required".
func TestAnOptionalBodyMayBeEmptyWhenChunked(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	sr := a.must(http.StatusCreated, http.MethodPost, "/v1/service-requests", a.opA,
		map[string]any{"customer_id": customer, "content": "leaking tap"}).Body["id"].(string)
	a.must(http.StatusOK, http.MethodPost, "/v1/service-requests/"+sr+"/status", a.opA, map[string]any{"status": "confirmed"})

	req, err := http.NewRequest(http.MethodPost, a.base+"/v1/service-requests/"+sr+"/convert", io.NopCloser(strings.NewReader("")))
	require.NoError(t, err)
	req.ContentLength = -1 // sent chunked: the length is not known ahead
	req.Header.Set("Authorization", "Bearer "+a.opA)
	res, err := a.client.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusCreated, res.StatusCode, "%s", body)
}

// expected_version -1 is not a version any aggregate can
// be at, yet it answers 409 "read it again and retry", which a client's
// retry loop follows for ever; If-Match: "-1" is a 400 naming If-Match.
func TestANegativeExpectedVersionIsInvalidNotAConflict(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	order := a.createOrder(a.opA, a.createCustomer(a.opA, "Ada"), 100)
	r := a.do(http.MethodPatch, "/v1/orders/"+order, a.opA, `{"expected_version":-1,"notes":"x"}`)
	require.Contains(t, []int{http.StatusBadRequest, http.StatusUnprocessableEntity}, r.Status, "%s", r)
	require.Equal(t, []string{"expected_version"}, problemFields(r), "%s", r)
}

// REQUEST_STATEMENT_TIMEOUT past Postgres's limit for
// statement_timeout (2147483647 ms, about 596h) passes the configuration's
// checks; every request pool connection is then refused by the server, and
// serve fails with "DATABASE_URL (request pool): ... invalid value for
// parameter statement_timeout", naming the wrong setting.
func TestRequestStatementTimeoutIsBounded(t *testing.T) {
	env := map[string]string{"REQUEST_STATEMENT_TIMEOUT": "600h"}
	_, _, err := loadConfig(func(k string) string { return env[k] }, flag.NewFlagSet("t", flag.ContinueOnError), nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "REQUEST_STATEMENT_TIMEOUT")
}

// listen addresses are checked only for a host:port
// shape; a port out of range (or a host with a space) passes, and serve
// fails only after opening and migrating the databases. The configuration
// says it "validates everything once" and every error names its setting.
func TestListenAddressesPollIntervalAndGOGCAreValidated(t *testing.T) {
	for _, env := range []map[string]string{
		{"HTTP_ADDR": ":99999"},
		{"HTTP_ADDR": ":-1"},
		{"ADMIN_ADDR": "127.0.0.1:70000"},
		{"HTTP_ADDR": "bad host:80"},
		{"POLL_INTERVAL": "1ns"},
		{"GOGC": "abc"},
	} {
		_, _, err := loadConfig(func(k string) string { return env[k] }, flag.NewFlagSet("t", flag.ContinueOnError), nil)
		require.Error(t, err, "%v", env)
		for name := range env {
			require.Contains(t, err.Error(), name)
		}
	}
}

// Times are stored with microsecond precision (docs/api.md), so a body's
// time is read to the microsecond: two times that differ only below it
// are the same time. An assignment from 10:00:00.0000001 to
// 10:00:00.0000009 passed the rule that its end is after its start, then
// became an empty booking that Postgres's check refused: 500
// /problems/internal, where the same period given to the microsecond is
// 422 naming end_at. Times that differ by a microsecond stay apart.
func TestTimesBelowAMicrosecondApartAreOneTime(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	order := a.createOrder(a.opA, customer, 100)
	before := a.events("")
	r := a.do(http.MethodPut, "/v1/orders/"+order+"/assignment", a.opA,
		map[string]any{"staff_id": a.staffA, "start_at": "2030-06-01T09:00:00.0000001Z", "end_at": "2030-06-01T09:00:00.0000009Z"})
	requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
	require.Equal(t, before, a.events(""), "nothing written")

	assigned := a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order+"/assignment", a.opA,
		map[string]any{"staff_id": a.staffA, "start_at": "2030-06-01T09:00:00.0000001Z", "end_at": "2030-06-01T09:00:00.0000019Z"})
	require.Equal(t, "2030-06-01T09:00:00Z", assigned.Body["scheduled_start_at"])
	require.Equal(t, "2030-06-01T09:00:00.000001Z", assigned.Body["scheduled_end_at"])
}
