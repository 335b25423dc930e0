package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"io"
	stdlog "log"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app"
	"hearth/domain/uuid"
	"hearth/internal/advisory"
	"hearth/internal/pgtest"
	httpport "hearth/ports/http"
)

// metrics is what GET /metrics answers ("" on any failure). It never
// touches t, so Eventually can poll it.
func (a *api) metrics() string {
	res, err := a.client.Get(a.base + "/metrics")
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		return ""
	}
	return string(body)
}

// The HTTP server's limits: a client that sends its headers too slowly is
// cut off, headers over the cap answer 431, and an idle keep-alive
// connection is closed.
func TestHTTPServerLimits(t *testing.T) {
	t.Parallel()
	cfg := Config{HTTPReadTimeout: 200 * time.Millisecond, HTTPWriteTimeout: 5 * time.Second, HTTPIdleTimeout: 300 * time.Millisecond}
	srv := newHTTPServer(cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	require.Equal(t, 200*time.Millisecond, srv.ReadHeaderTimeout, "the headers get at most the read timeout")
	require.Equal(t, 5*time.Second, newHTTPServer(Config{HTTPReadTimeout: time.Minute}, nil).ReadHeaderTimeout, "and at most 5s")
	require.Equal(t, 5*time.Second, srv.WriteTimeout)
	require.Equal(t, maxHeaderBytes, srv.MaxHeaderBytes)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = serveOn(cfg, srv, ln, nil) }()
	t.Cleanup(func() { _ = srv.Close() })

	dial := func(t *testing.T) net.Conn {
		conn, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second))) // the test's bound, far above the server's
		return conn
	}
	// closed reads until the server closes the connection.
	closed := func(t *testing.T, conn net.Conn) string {
		got, err := io.ReadAll(conn)
		require.NoError(t, err, "the server closed the connection (not the test's deadline)")
		return string(got)
	}

	t.Run("slow headers", func(t *testing.T) {
		conn := dial(t)
		_, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n") // and never the blank line
		require.NoError(t, err)
		closed(t, conn)
	})
	t.Run("slow body", func(t *testing.T) {
		conn := dial(t)
		_, err := io.WriteString(conn, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
		require.NoError(t, err)
		closed(t, conn)
	})
	// What net/http refuses before any handler runs is a problem too
	// (httpport.Listener), and the connection is closed.
	for _, tc := range []struct {
		name, request, typ, detail string
		status                     int
	}{
		{name: "headers over the cap", request: "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", maxHeaderBytes+4096) + "\r\n\r\n",
			status: http.StatusRequestHeaderFieldsTooLarge, typ: "/problems/headers-too-large",
			detail: "the request line and headers are larger than " + strconv.Itoa(maxHeaderBytes) + " bytes"},
		{name: "unreadable header", request: "GET /healthz HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n",
			status: http.StatusBadRequest, typ: "/problems/malformed-request", detail: "the request could not be read as HTTP/1.1"},
		{name: "no host", request: "GET /healthz HTTP/1.1\r\n\r\n", status: http.StatusBadRequest, typ: "/problems/malformed-request",
			detail: "the request could not be read as HTTP/1.1: missing required Host header"},
		{name: "unsupported transfer coding", request: "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
			status: http.StatusNotImplemented, typ: "/problems/not-implemented", detail: "unsupported transfer encoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := dial(t)
			_, err := io.WriteString(conn, tc.request)
			require.NoError(t, err)
			status, p := rawProblem(t, closed(t, conn))
			require.Equal(t, tc.status, status)
			require.Equal(t, tc.typ, p.Type)
			require.Equal(t, tc.detail, p.Detail)
		})
	}
	t.Run("idle keep-alive", func(t *testing.T) {
		conn := dial(t)
		_, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		require.Contains(t, closed(t, conn), "204 No Content", "answered, then closed when idle")
	})
}

// An Expect other than 100-continue is refused by net/http before any
// handler runs, with a bare 417 (no body, no type): it is a problem too
// (httpport.Listener), naming the header, and the connection is closed.
func TestAnExpectationThatCannotBeMetIsAProblem(t *testing.T) {
	t.Parallel()
	cfg := Config{HTTPReadTimeout: 5 * time.Second, HTTPWriteTimeout: 5 * time.Second, HTTPIdleTimeout: 5 * time.Second}
	srv := newHTTPServer(cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = serveOn(cfg, srv, ln, nil) }()
	t.Cleanup(func() { _ = srv.Close() })

	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second))) // the test's bound, far above the server's
	_, err = io.WriteString(conn, "POST /v1/customers HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n{}")
	require.NoError(t, err)
	raw, err := io.ReadAll(conn)
	require.NoError(t, err, "the server closed the connection (not the test's deadline)")
	status, p := rawProblem(t, string(raw))
	require.Equal(t, http.StatusExpectationFailed, status)
	require.Equal(t, "/problems/malformed-request", p.Type)
	require.Contains(t, p.Detail, "Expect")
}

// rawProblem reads a raw HTTP answer that must be a problem: its status and
// body.
func rawProblem(t *testing.T, raw string) (int, httpport.Problem) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), nil)
	require.NoError(t, err, "an HTTP answer: %q", raw)
	defer resp.Body.Close()
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), "%q", raw)
	var p httpport.Problem
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p), "%q", raw)
	require.Equal(t, resp.StatusCode, p.Status)
	return resp.StatusCode, p
}

// A panicking handler answers a 500 problem without internals, its stack is
// logged once, and the server keeps serving.
func TestRecoverPanics(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	var logs, serverLog syncBuffer
	// An application with nothing wired: every use case is a nil
	// dereference.
	h, err := httpport.NewHandler(httpport.Config{
		App: app.Application{}, Auth: a.w.refdata, APIEnabled: true, Log: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = stdlog.New(&serverLog, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	b := &api{t: t, base: srv.URL, client: srv.Client()}

	for i := range 2 {
		r := b.do(http.MethodGet, "/v1/orders", a.opA, nil)
		requireProblem(t, r, http.StatusInternalServerError, "/problems/internal")
		require.NotContains(t, r.Raw, "nil pointer", "no internals in the answer")
		require.NotContains(t, r.Raw, "goroutine")
		require.Equal(t, "no-store", r.Header.Get("Cache-Control"))
		require.NotEmpty(t, r.Header.Get("X-Correlation-ID"))
		require.Equal(t, i+1, strings.Count(logs.String(), `"msg":"handler panicked"`), "logged once per panic: %s", &logs)
		b.must(http.StatusOK, http.MethodGet, "/healthz", "", nil) // still serving
	}
	require.Contains(t, logs.String(), "nil pointer dereference")
	require.Contains(t, logs.String(), "ports/http.(*server).listOrders", "with the stack")
	require.Contains(t, logs.String(), `"correlation_id":`)
	require.Empty(t, serverLog.String(), "net/http did not log the panic again")
}

// The method label of the HTTP metrics takes known methods only, so a
// client cannot grow the label set.
func TestMetricsMethodLabel(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	for _, method := range []string{"FOOBAR", "PROPFIND", "get"} {
		_, err := a.send(method, "/v1/orders", auth(a.opA), nil)
		require.NoError(t, err)
	}
	a.must(http.StatusOK, http.MethodGet, "/v1/orders", a.opA, nil)
	m := a.metrics()
	require.NotContains(t, m, "FOOBAR")
	require.NotContains(t, m, "PROPFIND")
	require.NotContains(t, m, `method="get"`)
	require.Regexp(t, `hearth_http_requests_total\{code="\d+",method="other",route="[^"]+"\} 3\n`, m)
	require.Contains(t, m, `hearth_http_requests_total{code="200",method="GET",route="GET /v1/orders"} 1`)
}

// API answers are not to be cached or sniffed; the OpenAPI document keeps
// its public cache header.
func TestAPIAnswerHeaders(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	for _, c := range []struct {
		method, path, key string
		body              any
		status            int
	}{
		{http.MethodGet, "/v1/orders", a.opA, nil, http.StatusOK},
		{http.MethodPost, "/v1/orders", a.opA, map[string]any{"customer_id": customer, "amount_cents": 1}, http.StatusCreated},
		{http.MethodGet, "/v1/customers/" + customer, a.opA, nil, http.StatusOK},
		{http.MethodGet, "/v1/orders/" + uuid.New(), a.opA, nil, http.StatusNotFound},
		{http.MethodPost, "/v1/orders", a.opA, "{", http.StatusBadRequest},
		{http.MethodGet, "/v1/orders", "", nil, http.StatusUnauthorized},
		{http.MethodGet, "/admin/parked", a.admin, nil, http.StatusOK},
		{http.MethodGet, "/admin/parked", a.opA, nil, http.StatusForbidden},
		{http.MethodGet, "/nowhere", "", nil, http.StatusNotFound},
		{http.MethodGet, "/readyz", "", nil, http.StatusOK},
	} {
		r := a.do(c.method, c.path, c.key, c.body)
		require.Equal(t, c.status, r.Status, "%s %s: %s", c.method, c.path, r)
		require.Equal(t, "no-store", r.Header.Get("Cache-Control"), "%s %s", c.method, c.path)
		require.Equal(t, "nosniff", r.Header.Get("X-Content-Type-Options"), "%s %s", c.method, c.path)
	}
	res, err := a.client.Get(a.base + "/openapi.json")
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, "public, max-age=300", res.Header.Get("Cache-Control"))
	require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
}

// With an admin surface of its own, the public listener does not serve
// /metrics and /admin/*, and the admin listener serves only them and the
// health endpoints. Without one (Surface zero), one handler serves all.
func TestAdminSurface(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	handler := func(sf httpport.Surface) *api {
		h, err := httpport.NewHandler(httpport.Config{
			App: a.w.app, Auth: a.w.refdata, APIEnabled: true, Log: slog.New(slog.DiscardHandler),
			Parked: a.w.operator, Metrics: a.w.telemetry.handler(), Surface: sf,
		})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return &api{t: t, base: srv.URL, client: srv.Client()}
	}
	type want map[string]int // "key path" -> status
	for name, c := range map[string]struct {
		api  *api
		want want
	}{
		"one listener": {a, want{
			"admin /metrics": 200, "admin /admin/parked": 200, "operator /admin/parked": 403,
			"operator /v1/orders": 200, "none /healthz": 200, "none /readyz": 200, "none /openapi.json": 200,
			"none /debug/pprof/cmdline": 404,
		}},
		"public": {handler(httpport.SurfacePublic), want{
			"admin /metrics": 404, "admin /admin/parked": 404, "operator /admin/parked": 404,
			"operator /v1/orders": 200, "none /healthz": 200, "none /readyz": 200, "none /openapi.json": 200,
			"none /debug/pprof/cmdline": 404,
		}},
		"admin": {handler(httpport.SurfaceAdmin), want{
			"admin /metrics": 200, "admin /admin/parked": 200, "operator /admin/parked": 403,
			"operator /v1/orders": 404, "none /healthz": 200, "none /readyz": 200, "none /openapi.json": 404,
			"none /debug/pprof/cmdline": 200, "none /debug/pprof/heap": 200,
		}},
	} {
		for req, status := range c.want {
			who, path, _ := strings.Cut(req, " ")
			key := map[string]string{"admin": a.admin, "operator": a.opA, "none": ""}[who]
			res, _ := c.api.send(http.MethodGet, path, auth(key), nil) // /metrics is not JSON; the status is what counts
			require.Equal(t, status, res.Status, "%s: GET %s with the %s key: %s", name, path, who, res)
		}
	}
}

// `app serve` with ADMIN_ADDR: two listeners, /metrics and /admin only on
// the admin one, and both shut down gracefully.
func TestServeAdminAddr(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t).EventStore
	vars := map[string]string{
		"DATABASE_URL": url, "LOG_FORMAT": "json", "POLL_INTERVAL": "20ms", "SHUTDOWN_TIMEOUT": "5s",
		"ADMIN_ADDR": "127.0.0.1:0", "MODE": "api",
	}
	key := createKeyCLI(t, vars, "--merchant", "acme", "--role", "operator")
	started := startServe(t, vars)
	require.NotEmpty(t, started.AdminAddr)
	require.NotEqual(t, started.HTTPAddr, started.AdminAddr)

	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	public := &api{t: t, base: "http://" + started.HTTPAddr, client: &http.Client{Transport: transport}}
	admin := &api{t: t, base: "http://" + started.AdminAddr, client: &http.Client{Transport: transport}}
	public.must(http.StatusOK, http.MethodGet, "/v1/orders", key, nil)
	public.must(http.StatusNotFound, http.MethodGet, "/admin/parked", key, nil)
	public.must(http.StatusOK, http.MethodGet, "/readyz", "", nil)
	require.Empty(t, public.metrics(), "no /metrics on the public listener")
	require.Contains(t, admin.metrics(), "hearth_http_requests_total")
	admin.must(http.StatusForbidden, http.MethodGet, "/admin/parked", key, nil)
	admin.must(http.StatusNotFound, http.MethodGet, "/v1/orders", key, nil)
	admin.must(http.StatusOK, http.MethodGet, "/healthz", "", nil)
	// A CPU profile, from the admin listener only.
	profile, err := http.Get("http://" + started.AdminAddr + "/debug/pprof/profile?seconds=1")
	require.NoError(t, err)
	body, err := io.ReadAll(profile.Body)
	require.NoError(t, err)
	require.NoError(t, profile.Body.Close())
	require.Equal(t, http.StatusOK, profile.StatusCode, "%s", body)
	require.Equal(t, "application/octet-stream", profile.Header.Get("Content-Type"))
	require.NotEmpty(t, body)
	public.must(http.StatusNotFound, http.MethodGet, "/debug/pprof/cmdline", "", nil)

	started.shutdown()
	for _, base := range []string{public.base, admin.base} {
		_, err := http.Get(base + "/healthz")
		require.Error(t, err, "%s is closed", base)
	}
}

// REQUEST_STATEMENT_TIMEOUT cuts a request's query that runs too long (here:
// one waiting for a lock) with a 503 problem, on the write path and on the
// read path, while the pools of the projections and the operator's tools
// have no timeout.
func TestRequestStatementTimeout(t *testing.T) {
	t.Parallel()
	for name, newDB := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			a := setupConfigured(t, newDB(t), func(cfg *Config) { cfg.RequestStatementTimeout = 300 * time.Millisecond }, nil)
			apiES, apiRM := a.dbs.api()
			for pool, want := range map[*sql.DB]string{apiES.DB: "300ms", apiRM.DB: "300ms", a.dbs.es.DB: "0", a.dbs.rm.DB: "0"} {
				var got string
				require.NoError(t, pool.QueryRowContext(ctx, `SHOW statement_timeout`).Scan(&got))
				require.Equal(t, want, got)
			}
			_, err := a.dbs.es.DB.ExecContext(ctx, `SELECT pg_sleep(0.5)`)
			require.NoError(t, err, "worker work runs as long as it must")
			_, err = apiES.DB.ExecContext(ctx, `SELECT pg_sleep(0.5)`)
			require.ErrorContains(t, err, "statement timeout")

			customer := a.createCustomer(a.opA, "Ada")
			b := *a
			b.client = &http.Client{Transport: a.client.Transport, Timeout: 10 * time.Second} // no hang, whatever happens
			// locked runs fn while another session holds table of db locked.
			locked := func(db *sql.DB, table string, fn func()) {
				tx, err := db.BeginTx(ctx, nil)
				require.NoError(t, err)
				defer func() { require.NoError(t, tx.Rollback()) }()
				_, err = tx.ExecContext(ctx, `LOCK TABLE `+table+` IN ACCESS EXCLUSIVE MODE`)
				require.NoError(t, err)
				fn()
			}
			cut := func(method, path string, body any) {
				start := time.Now()
				r, err := b.send(method, path, auth(a.opA), body)
				require.NoError(t, err)
				requireProblem(t, r, http.StatusServiceUnavailable, "/problems/timeout")
				require.Equal(t, "1", r.Header.Get("Retry-After"))
				require.Less(t, time.Since(start), 5*time.Second)
			}
			locked(a.dbs.es.DB, "customers", func() {
				cut(http.MethodPost, "/v1/orders", map[string]any{"customer_id": customer, "amount_cents": 1})
				cut(http.MethodPatch, "/v1/customers/"+customer, map[string]any{"name": "Bea"})
			})
			locked(a.dbs.rm.DB, "orders", func() {
				cut(http.MethodGet, "/v1/orders", nil)
			})
			a.createOrder(a.opA, customer, 1) // and all is well again
			a.must(http.StatusOK, http.MethodGet, "/v1/orders", a.opA, nil)
		})
	}
}

// A position waited on must be one of the caller's merchant's writes:
// another merchant's answers 422 exactly like one that names no event, so
// nothing about other merchants shows.
func TestConsistencyPositionOfAnotherMerchant(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ownPos := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA,
		map[string]any{"customer_id": a.createCustomer(a.opA, "Ada"), "amount_cents": 1}).Header.Get("Consistency-Position")
	foreignPos := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opB,
		map[string]any{"customer_id": a.createCustomer(a.opB, "Gus"), "amount_cents": 1}).Header.Get("Consistency-Position")

	r := a.must(http.StatusOK, http.MethodGet, "/v1/orders?min_position="+ownPos, a.opA, nil)
	require.Equal(t, "reached", r.Header.Get("Consistency-Status"))
	r = a.must(http.StatusOK, http.MethodGet, "/v1/orders?min_position="+ownPos, a.worker, nil)
	require.Equal(t, "reached", r.Header.Get("Consistency-Status"), "a worker of the merchant too")

	var answers []string
	for _, pos := range []string{foreignPos, "999999999"} {
		r := a.must(http.StatusUnprocessableEntity, http.MethodGet, "/v1/orders?min_position="+pos, a.opA, nil)
		requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
		require.Equal(t, []string{"min_position"}, problemFields(r))
		answers = append(answers, r.Raw)

		h := auth(a.opA)
		h.Set("Consistency-Position", pos)
		r, err := a.send(http.MethodGet, "/v1/orders", h, nil)
		require.NoError(t, err)
		requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
		require.Equal(t, []string{"Consistency-Position"}, problemFields(r))
	}
	require.Equal(t, answers[0], answers[1], "another merchant's position reads like no position at all")
}

// At most CONSISTENCY_MAX_WAITS GETs wait at once; another answers at once
// with Consistency-Status: skipped.
func TestConsistencyMaxWaits(t *testing.T) {
	t.Parallel()
	g := make(gate)
	a := setupConfigured(t, pgtest.NewDB(t), func(cfg *Config) {
		cfg.ConsistencyMaxWaits, cfg.ConsistencyTimeout = 1, 10*time.Second
	}, slowOrders(g))
	created := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA,
		map[string]any{"customer_id": a.createCustomer(a.opA, "Ada"), "amount_cents": 1})
	pos := created.Header.Get("Consistency-Position")

	// wait sends the GET that holds the one slot until the gate opens.
	wait := func() chan response {
		waiting := make(chan response, 1)
		go func() {
			h := auth(a.opA)
			h.Set("Consistency-Position", pos)
			r, err := a.send(http.MethodGet, "/v1/orders", h, nil)
			if err != nil {
				r.Raw = err.Error()
			}
			waiting <- r
		}()
		return waiting
	}
	waiting := wait()
	probe := func(timeout string) string {
		h := auth(a.opA)
		h.Set("Consistency-Position", pos)
		h.Set("Consistency-Timeout", timeout)
		r, err := a.send(http.MethodGet, "/v1/orders", h, nil)
		if err != nil || r.Status != http.StatusOK {
			return ""
		}
		return r.Header.Get("Consistency-Status")
	}
	require.Eventually(t, func() bool {
		select {
		case r := <-waiting:
			// It came while a probe held the slot for its millisecond, and
			// was skipped itself: send it again, to hold the slot.
			if r.Header.Get("Consistency-Status") != "skipped" {
				t.Errorf("the waiting GET answered before the gate opened: %s", r)
			}
			waiting = wait()
			return false
		default:
		}
		return probe("1ms") == "skipped"
	}, 5*time.Second, time.Millisecond, "a GET over the cap is answered without waiting")
	close(g)
	r := <-waiting
	require.Equal(t, http.StatusOK, r.Status, "%s", r)
	require.Equal(t, "reached", r.Header.Get("Consistency-Status"), "the wait in flight was not disturbed")
	require.Equal(t, "reached", probe("5s"), "the slot is free again")
}

// createKeyCLI runs `app keys create` with args and returns the secret.
func createKeyCLI(t *testing.T, vars map[string]string, args ...string) string {
	t.Helper()
	var out syncBuffer
	require.NoError(t, run(t.Context(), append([]string{"keys", "create"}, args...), env(vars), &out, io.Discard))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1]
}

// served is `app serve` running for a test, with the addresses its
// start-up log line names.
type served struct {
	t         *testing.T
	HTTPAddr  string `json:"http_addr"`
	AdminAddr string `json:"admin_addr"`
	stderr    *syncBuffer
	stop      context.CancelFunc
	done      chan error
	stopped   bool
}

// startServe runs `app serve --http-addr 127.0.0.1:0` with the environment
// vars (LOG_FORMAT json) until shutdown or the end of the test, and waits
// for its start-up log line.
func startServe(t *testing.T, vars map[string]string) *served {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	s := &served{t: t, stderr: &syncBuffer{}, stop: stop, done: make(chan error, 1)}
	if _, set := vars["MASTER_KEY"]; !set {
		vars = maps.Clone(vars)
		if vars == nil {
			vars = map[string]string{}
		}
		vars["MASTER_KEY"] = testMasterKey
	}
	go func() {
		s.done <- run(ctx, []string{"serve", "--http-addr", "127.0.0.1:0"}, env(vars), io.Discard, s.stderr)
	}()
	t.Cleanup(func() {
		if !s.stopped {
			stop()
			<-s.done
		}
	})
	require.Eventually(t, func() bool {
		for _, line := range strings.Split(s.stderr.String(), "\n") {
			var entry struct {
				Msg string `json:"msg"`
			}
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "hearth started" {
				require.NoError(t, json.Unmarshal([]byte(line), s))
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "serve never logged its start: %s", s.stderr)
	return s
}

// shutdown ends serve and requires that it stops cleanly within 10s.
func (s *served) shutdown() {
	s.t.Helper()
	s.stop()
	select {
	case err := <-s.done:
		s.stopped = true
		require.NoError(s.t, err, "serve stops cleanly")
	case <-time.After(10 * time.Second):
		s.t.Fatalf("serve did not stop within 10s of its context ending: %s", s.stderr)
	}
	require.Contains(s.t, s.stderr.String(), `"msg":"hearth stopped"`)
}

// A request's context ends with HTTP_WRITE_TIMEOUT (no answer can be
// written after it), so a database call of a request never outlives it,
// even on a connection to a server that stopped answering.
func TestRequestContextEndsWithWriteTimeout(t *testing.T) {
	t.Parallel()
	ended := make(chan error, 1)
	srv := newHTTPServer(Config{HTTPReadTimeout: time.Second, HTTPWriteTimeout: 200 * time.Millisecond},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // a call waiting on a silent server
			ended <- r.Context().Err()
		}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = serveOn(Config{}, srv, ln, nil) }()
	t.Cleanup(func() { _ = srv.Close() })
	client := &http.Client{Timeout: time.Minute} // the client would wait far longer
	go func() {
		if res, err := client.Get("http://" + ln.Addr().String() + "/v1/orders"); err == nil {
			_ = res.Body.Close()
		}
	}()
	require.ErrorIs(t, <-ended, context.DeadlineExceeded, "the server ended the request, not the client")
}

// A body that does not arrive within HTTP_READ_TIMEOUT (trickled, or
// stalled) is answered 408 /problems/request-timeout, through the API's
// real handler and server, with or without an Idempotency-Key (whose
// handler reads the body first), and the connection is then closed: the
// client is told why, rather than left with a 400 that blames its JSON or
// a 500 logged as a fault of Hearth. Without a key cache (KEY_CACHE_TTL=0)
// and with the key found working just before, the plain write starts
// without looking its key up (keygate.go) and looks it up when it answers,
// after its body's read failed: that read ended the request's context, the
// client is still there all the same.
func TestSlowBodyAnswers408(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	cfg := a.cfg
	cfg.HTTPReadTimeout, cfg.HTTPWriteTimeout = 300*time.Millisecond, 10*time.Second
	cfg.KeyCacheTTL = 0
	hcfg, err := httpConfig(cfg, a.dbs, a.w, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { closeConsole(hcfg.Console) })
	handler, err := httpport.NewHandler(hcfg)
	require.NoError(t, err)
	srv := newHTTPServer(cfg, handler)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = serveOn(cfg, srv, ln, nil) }()
	t.Cleanup(func() { _ = srv.Close() })

	for name, extra := range map[string]string{
		"plain":           "",
		"idempotency key": "Idempotency-Key: " + uuid.New() + "\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			// The key found working: the write's key is then checked when it answers.
			req, err := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/v1/customers", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+a.opA)
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			_ = res.Body.Close()
			require.Equal(t, http.StatusOK, res.StatusCode)

			conn, err := net.Dial("tcp", ln.Addr().String())
			require.NoError(t, err)
			t.Cleanup(func() { _ = conn.Close() })
			require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second))) // the test's bound, far above the server's
			_, err = io.WriteString(conn, "POST /v1/customers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+a.opA+"\r\n"+
				extra+"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\":") // and never the rest
			require.NoError(t, err)
			raw, err := io.ReadAll(conn)
			require.NoError(t, err, "the server answered and closed the connection (not the test's deadline)")
			status, p := rawProblem(t, string(raw))
			require.Equal(t, http.StatusRequestTimeout, status, "%s", raw)
			require.Equal(t, "/problems/request-timeout", p.Type)
		})
	}
	a.must(http.StatusOK, http.MethodGet, "/v1/customers", a.opA, nil) // nothing was written, and the API still serves
}

// GET /metrics needs no key, and without ADMIN_ADDR is served on the public
// listener: a flood of scrapes must not cost the databases a round of the
// collectors' queries each (on the event store's pool, which the
// projections use). Here the webhook collector's table is locked, so that
// each round of its query waits (and is logged as unavailable) for its
// 3 s: the concurrent scrapes share one round.
func TestMetricsFloodSharesOneRoundOfQueries(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t).EventStore
	started := startServe(t, map[string]string{"DATABASE_URL": url, "LOG_FORMAT": "json", "MODE": "api"})
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(t.Context(), `LOCK TABLE webhook_endpoints IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	const scrapes = 8
	client := &http.Client{Timeout: 30 * time.Second}
	done := make(chan error, scrapes)
	for range scrapes {
		go func() {
			res, err := client.Get("http://" + started.HTTPAddr + "/metrics")
			if err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				err = res.Body.Close()
			}
			done <- err
		}()
	}
	for range scrapes {
		require.NoError(t, <-done)
	}
	require.NoError(t, tx.Rollback())
	require.Equal(t, 1, strings.Count(started.stderr.String(), `"msg":"webhook metrics unavailable"`),
		"one round of the webhook collector's query for %d concurrent scrapes", scrapes)
}

// A serve stopped (SIGTERM, Ctrl-C) before it is ready, here while another
// instance holds the migrations lock, stops as asked: exit status 0 and a
// line that says so, as a serve stopped once ready does. An orchestrator
// stopping an instance mid-start in a rolling restart is not a failure, and
// status 1 reads as one (systemd marks the unit failed).
func TestServeStoppedBeforeItIsReadyStopsCleanly(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t).EventStore
	db := holdMigrationsLock(t, url)

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--http-addr", "127.0.0.1:0"}, env(map[string]string{
			"DATABASE_URL": url, "MASTER_KEY": testMasterKey, "LOG_FORMAT": "json"}), io.Discard, &stderr)
	}()
	require.False(t, pgtest.DoneOrWaiting(t, db, done), "serve waits for the migrations lock")
	stop() // the signal
	err := <-done
	require.NoError(t, err, "a stop asked for is not a failure")
	require.Equal(t, 0, report(err, env(nil), io.Discard))
	require.Contains(t, stderr.String(), "stopped before it was ready", "%s", stderr.String())
	require.Contains(t, stderr.String(), "migrations lock", "what it was doing when stopped: %s", stderr.String())
}

// holdMigrationsLock holds the migrations lock of the database at url, as
// another instance migrating it does, until the test ends; it returns a
// connection pool of that database to watch what waits for it with
// (pgtest.DoneOrWaiting).
func holdMigrationsLock(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	holder, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Rollback() })
	_, err = holder.Exec(`SELECT pg_advisory_xact_lock($1)`, advisory.MigrationsKey)
	require.NoError(t, err)
	return db
}

// healthzOn opens a connection to addr and sends GET /healthz on it,
// leaving it open until the test ends; it returns the connection and the
// answer.
func healthzOn(t *testing.T, addr string) (net.Conn, *http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second))) // the test's bound, far above the server's
	_, err = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	return conn, res, string(body)
}

// A client address may hold at most HTTP_MAX_CONNECTIONS_PER_ADDRESS
// connections open at once: each holds a file descriptor, a goroutine and
// its buffers, and /healthz, which no key or budget guards, keeps one from
// going idle. Without a cap one address holds the process's descriptors,
// and then no other client connects and no database connection opens.
// Over the cap a connection is answered 429 (limit connections, with
// Retry-After) and closed; once one of the address's connections ends, it
// may open another. A trusted proxy (TRUSTED_PROXIES) carries many
// clients: its connections are not capped.
func TestConnectionsPerAddressAreCapped(t *testing.T) {
	t.Parallel()
	serve := func(t *testing.T, vars map[string]string) string {
		vars["DATABASE_URL"] = testDatabaseURL
		cfg, _, err := loadConfig(env(vars), flag.NewFlagSet("serve", flag.ContinueOnError), nil)
		require.NoError(t, err)
		srv := newHTTPServer(cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		go func() { _ = serveOn(cfg, srv, ln, nil) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ln.Addr().String()
	}
	get := healthzOn

	t.Run("one address", func(t *testing.T) {
		t.Parallel()
		addr := serve(t, map[string]string{"HTTP_MAX_CONNECTIONS_PER_ADDRESS": "2"})
		first, res, _ := get(t, addr)
		require.Equal(t, http.StatusNoContent, res.StatusCode)
		_, res, _ = get(t, addr)
		require.Equal(t, http.StatusNoContent, res.StatusCode)

		third, res, body := get(t, addr)
		require.Equal(t, http.StatusTooManyRequests, res.StatusCode, "a third connection from one address is refused, not served")
		require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
		require.NotEmpty(t, res.Header.Get("Retry-After"))
		var p httpport.Problem
		require.NoError(t, json.Unmarshal([]byte(body), &p), "%s", body)
		require.Equal(t, "/problems/rate-limited", p.Type)
		require.Equal(t, "connections", p.Limit)
		rest, err := io.ReadAll(third)
		require.NoError(t, err, "the server closed the refused connection")
		require.Empty(t, rest)

		// One of the address's connections ends: it may open another.
		require.NoError(t, first.Close())
		deadline := time.Now().Add(10 * time.Second)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			_, res, _ := get(t, addr)
			if res.StatusCode == http.StatusNoContent {
				break
			}
			require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
			require.False(t, time.Now().After(deadline), "a connection freed by its client is never counted free")
			<-tick.C
		}
	})

	t.Run("a trusted proxy", func(t *testing.T) {
		t.Parallel()
		addr := serve(t, map[string]string{"HTTP_MAX_CONNECTIONS_PER_ADDRESS": "2", "TRUSTED_PROXIES": "127.0.0.1"})
		for range 3 {
			_, res, _ := get(t, addr)
			require.Equal(t, http.StatusNoContent, res.StatusCode, "a trusted proxy's connections are not capped")
		}
	})
}

// A connection refused over HTTP_MAX_CONNECTIONS_PER_ADDRESS never
// becomes a request, so hearth_http_requests_total does not see it; many
// clients behind one NAT look like one address, and the operator who is to
// raise the cap or list that address as a proxy learns of the refusals from
// hearth_http_connections_refused_total, by listener and outcome.
func TestRefusedConnectionsAreCounted(t *testing.T) {
	t.Parallel()
	vars := map[string]string{
		"DATABASE_URL": pgtest.NewDB(t).EventStore, "LOG_FORMAT": "json", "MODE": "api", "ADMIN_ADDR": "127.0.0.1:0",
		"HTTP_MAX_CONNECTIONS_PER_ADDRESS": "1",
	}
	started := startServe(t, vars)
	get := func() *http.Response {
		_, res, _ := healthzOn(t, started.HTTPAddr)
		return res
	}
	require.Equal(t, http.StatusOK, get().StatusCode)
	require.Equal(t, http.StatusTooManyRequests, get().StatusCode, "the address's second connection is refused")

	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	admin := &api{t: t, base: "http://" + started.AdminAddr, client: &http.Client{Transport: transport}}
	require.Contains(t, admin.metrics(), `hearth_http_connections_refused_total{listener="HTTP_ADDR",outcome="answered"} 1`+"\n")
}
