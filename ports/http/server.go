// Package httpport is Hearth's HTTP API: routing, authentication, decoding,
// and the mapping of application errors to problem+json. It calls the
// application only through app.Application.
package httpport

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"hearth/app"
	"hearth/app/access"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/internal/aggregates"
)

// Authenticator resolves an API key; an unknown key is apperr.ErrNotFound.
type Authenticator interface {
	Authenticate(ctx context.Context, secret string) (access.Principal, error)
}

// Config is what NewHandler needs.
type Config struct {
	App  app.Application
	Auth Authenticator
	// Ready reports readiness for /readyz: details to show, and an error
	// when the instance cannot serve. Defaults to always ready.
	Ready func(ctx context.Context) (map[string]any, error)
	// Log defaults to slog.Default().
	Log *slog.Logger
	// MaxBodyBytes caps request bodies. Defaults to 1 MiB.
	MaxBodyBytes int64
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// APIEnabled serves /v1; false serves only the health endpoints (worker
	// mode).
	APIEnabled bool
	// Parked serves /admin/parked and the Projection-Parked header of
	// details (ops.Operator). Optional.
	Parked ParkedAggregates
	// Rebuilds serves /admin/rebuilds (ops.Operator). Optional.
	Rebuilds ProjectionRebuilds
	// Metrics serves GET /metrics, unauthenticated (Prometheus). Optional.
	Metrics http.Handler
	// ObserveRequest records each request's method (one of knownMethods,
	// or "other"), route, status and duration (HTTP metrics). Optional.
	ObserveRequest func(method, route string, status int, d time.Duration)
	// Tracer gives each request a span (tracing.go). Optional: without it,
	// no span is made and a client's traceparent is ignored.
	Tracer trace.Tracer
	// Leadership reports the instance's leadership for GET
	// /admin/leadership (admin keys). Nil: the route answers 404.
	Leadership func(ctx context.Context) (map[string]any, error)
	// Consistency makes a GET with a position wait for it (read your
	// writes). Optional: without it, positions are ignored.
	Consistency Consistency
	// Reads picks the server each authenticated GET reads from: a read
	// replica or the primary (internal/replicas). Optional: without it,
	// every read goes to the primary.
	Reads ReadRouter
	// ConsistencyTimeout bounds that wait. Defaults to 2s.
	ConsistencyTimeout time.Duration
	// Limits are the rate limits and the in-flight cap (limits.go). The
	// zero Limits limits nothing.
	Limits Limits
	// TrustedProxies are the peers whose X-Forwarded-For names the client
	// address (for the budget of unknown keys). None by default: the
	// header is ignored.
	TrustedProxies []netip.Prefix
	// KeyCacheTTL is how long a known key's principal is cached; a revoked
	// key stops working within it. 0 caches nothing.
	KeyCacheTTL time.Duration
	// KeyUsed is called with the key id of every request a key
	// authenticated (cached or looked up). Optional; it must be cheap.
	KeyUsed func(keyID string)
	// Idempotency keeps Idempotency-Key records. Optional: without it the
	// header is ignored (tests of other things).
	Idempotency Idempotency
	// IdempotencyWait bounds how long a repeat waits for the answer of an
	// attempt still running with its key, before 409. Defaults to 5s.
	IdempotencyWait time.Duration
	// IdempotencyLease is how long an attempt holds its key before a retry
	// may take it over (its process died). Longer than any write runs.
	// Defaults to 1m.
	IdempotencyLease time.Duration
	// IdempotencyMaxInFlight caps the idempotent writes running at once:
	// each holds a connection while it renders its answer, which may take
	// another, so the cap stays below the pool's size. Defaults to 8.
	IdempotencyMaxInFlight int
	// IdempotencyMerchantMaxInFlight caps one merchant's share of them, so
	// that the others still get slots while its writes hold theirs; a freed
	// slot goes to the waiting merchant that holds the fewest (slots.go).
	// Defaults to half of IdempotencyMaxInFlight, at least 1.
	IdempotencyMerchantMaxInFlight int
	// Keys serves /admin/keys (admin keys; access.Keys). Optional: without
	// it, those routes answer 404.
	Keys KeyAdmin
	// Audit serves GET /admin/audit (admin keys). Optional.
	Audit AuditLog
	// Exports serves GET /v1/customers/{id}/export (operator keys;
	// ops.Exports). Optional: without it, the route answers 404.
	Exports CustomerExports
	// StaffExports serves GET /v1/staff/{id}/export (operator keys;
	// ops.StaffExports). Optional: without it, the route answers 404.
	StaffExports StaffMemberExports
	// ExportMaxInFlight caps the exports (a customer's, a staff member's)
	// built at once: each is held whole in memory until its answer is
	// written. Over the cap an export answers 503 at once (export.go).
	// Defaults to 2.
	ExportMaxInFlight int
	// ExportMerchantMaxInFlight caps one merchant's share of them; over it
	// an export answers 429 (limit exports). Defaults to half of
	// ExportMaxInFlight, at least 1.
	ExportMerchantMaxInFlight int
	// Erasures serves POST /v1/customers/{id}/erase and POST
	// /v1/staff/{id}/erase (operator keys; ops.Erasures). Optional: without
	// it, those routes answer 404.
	Erasures SubjectErasures
	// ConsistencyMaxWaits caps the waits in flight; a GET over the cap
	// answers without waiting (Consistency-Status: skipped). Defaults to 256;
	// negative: no GET waits.
	ConsistencyMaxWaits int
	// FeedWait is the longest a read of the event feed waits for an event
	// (long poll); a request's wait parameter may shorten it. Defaults to
	// 20s.
	FeedWait time.Duration
	// FeedMaxWaits caps the event feed's long polls in flight; over the cap
	// a read answers at once (503 when it has nothing). Defaults to 256.
	FeedMaxWaits int
	// Draining, once closed, ends the event feed's long polls at once, each
	// with what it has: the server is shutting down, and its graceful
	// shutdown should not wait for them. Optional.
	Draining <-chan struct{}
	// Surface is which routes this handler serves: all of them (the
	// default), or the public or admin half when /metrics and /admin/* have
	// a listener of their own (ADMIN_ADDR).
	Surface Surface
	// Console is the web console (ports/http/console), served under
	// /console/ when APIEnabled, with this server's fair share in each
	// request's context (FairShareOf). Optional.
	Console http.Handler
}

// Surface is a set of routes one listener serves.
type Surface int

const (
	// SurfaceAll serves every route.
	SurfaceAll Surface = iota
	// SurfacePublic serves every route but /metrics and /admin/*.
	SurfacePublic
	// SurfaceAdmin serves /metrics and /admin/*, and the health endpoints.
	SurfaceAdmin
)

// serves reports whether the surface serves the route.
func (sf Surface) serves(rt route) bool {
	_, path, _ := strings.Cut(rt.pattern, " ")
	admin := path == "/metrics" || strings.HasPrefix(path, "/admin/")
	health := path == "/healthz" || path == "/readyz"
	switch sf {
	case SurfacePublic:
		return !admin
	case SurfaceAdmin:
		return admin || health
	}
	return true
}

type server struct {
	Config
	log             *slog.Logger
	idempotentSlots *fairSlots
	exportSlots     *fairSlots    // one per export being built (oneExport)
	waits           chan struct{} // one token per read-your-writes wait in flight
	feedWaits       chan struct{} // one token per event feed long poll in flight
	limits          *limiter
	keyHits         *keyCache
	ready           readiness
	input           map[string]routeInput // each API route's declared query parameters and headers (checkQuery, checkHeaders)
}

// NewHandler returns the HTTP handler of the whole API.
func NewHandler(cfg Config) (http.Handler, error) {
	if cfg.APIEnabled && cfg.Auth == nil {
		return nil, errors.New("httpport.NewHandler: Auth is required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ConsistencyTimeout <= 0 {
		cfg.ConsistencyTimeout = 2 * time.Second
	}
	if cfg.ConsistencyMaxWaits == 0 {
		cfg.ConsistencyMaxWaits = 256
	}
	cfg.FeedWait = cmp.Or(cfg.FeedWait, 20*time.Second)
	cfg.FeedMaxWaits = cmp.Or(cfg.FeedMaxWaits, 256)
	if cfg.Ready == nil {
		cfg.Ready = func(context.Context) (map[string]any, error) { return map[string]any{}, nil }
	}
	cfg.IdempotencyWait = cmp.Or(cfg.IdempotencyWait, 5*time.Second)
	cfg.IdempotencyLease = cmp.Or(cfg.IdempotencyLease, time.Minute)
	cfg.IdempotencyMaxInFlight = cmp.Or(cfg.IdempotencyMaxInFlight, 8)
	cfg.IdempotencyMerchantMaxInFlight = cmp.Or(cfg.IdempotencyMerchantMaxInFlight, max(cfg.IdempotencyMaxInFlight/2, 1))
	slots := newFairSlots(cfg.IdempotencyMaxInFlight, cfg.IdempotencyMerchantMaxInFlight)
	cfg.ExportMaxInFlight = cmp.Or(cfg.ExportMaxInFlight, 2)
	cfg.ExportMerchantMaxInFlight = cmp.Or(cfg.ExportMerchantMaxInFlight, max(cfg.ExportMaxInFlight/2, 1))
	s := &server{Config: cfg, log: cfg.Log.With("component", "http"), idempotentSlots: slots,
		exportSlots: newFairSlots(cfg.ExportMaxInFlight, cfg.ExportMerchantMaxInFlight),
		waits:       make(chan struct{}, max(cfg.ConsistencyMaxWaits, 0)), feedWaits: make(chan struct{}, max(cfg.FeedMaxWaits, 0)),
		limits: newLimiter(cfg.Limits, cfg.TrustedProxies), keyHits: newKeyCache(cfg.KeyCacheTTL)}
	rts := s.routes()
	input, err := declaredInput(rts)
	if err != nil {
		return nil, fmt.Errorf("httpport.NewHandler: %w", err)
	}
	s.input = input
	mux := http.NewServeMux()
	for _, rt := range rts {
		if (rt.api && !cfg.APIEnabled) || (len(rt.roles) > 0 && cfg.Auth == nil) || !cfg.Surface.serves(rt) {
			continue
		}
		h := rt.handle
		if method, _, _ := strings.Cut(rt.pattern, " "); rt.api && method != http.MethodGet && !rt.etag {
			// Every write, DELETE and /admin included: one that checks no
			// version would otherwise run as if If-Match had not been sent.
			h = noIfMatch(h)
		}
		if rt.api && isWrite(rt.pattern) {
			h = s.idempotent(h)
		}
		mux.Handle(rt.pattern, s.auth(rt.keyInWrite, rt.roles...)(h))
	}
	if cfg.Surface == SurfaceAdmin {
		// Go's profiles, on the admin listener only (the private network's,
		// like /metrics), never on the public one nor when one listener
		// serves everything: a profile shows the code and costs CPU.
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	if cfg.Console != nil && cfg.APIEnabled {
		mux.Handle("/console/", s.shareFairly(cfg.Console))
		mux.Handle("GET /console", http.RedirectHandler("/console/", http.StatusMovedPermanently))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allow := allowedMethods(mux, r); allow != "" {
			// RFC 9110 wants Allow on a 405; a 404 here would read as "no
			// such resource" (DELETE of an order that exists).
			w.Header().Set("Allow", allow)
			writeProblem(w, newProblem(http.StatusMethodNotAllowed, "method-not-allowed",
				r.URL.Path+" does not take "+r.Method+"; it takes "+allow))
			return
		}
		writeProblem(w, newProblem(http.StatusNotFound, "not-found", "no route for "+r.Method+" "+r.URL.Path))
	})
	return s.logRequests(apiHeaders(s.traceRequests(s.observe(s.recoverPanics(s.limitBody(pathless(mux))))))), nil
}

// pathless answers a request whose target has no path, as a CONNECT's
// host:port (an open-proxy probe): net/http's mux matches no pattern for
// it, not even the catch-all "/", and would answer its own text/plain 404
// rather than a problem.
func pathless(mux http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/") {
			writeProblem(w, newProblem(http.StatusNotFound, "not-found", "no route for "+r.Method+" "+r.RequestURI))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// routedMethods are the methods a route may be declared with, in the order
// Allow lists them; HEAD is served wherever GET is (net/http's mux).
var routedMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowedMethods lists, comma-separated, the methods some route of mux
// serves on r's path ("" when none does). It asks mux itself, so it says
// exactly what this listener serves (its Surface, its mode). Go's mux would
// answer 405 with Allow on its own, but only when no pattern matches at
// all, and the catch-all "/" that answers problems matches every request.
func allowedMethods(mux *http.ServeMux, r *http.Request) string {
	var allow []string
	for _, m := range routedMethods {
		probe := *r // a shallow copy: mux.Handler reads only the method, host and path
		probe.Method = m
		if _, pattern := mux.Handler(&probe); pattern != "" && pattern != "/" {
			allow = append(allow, m)
		}
	}
	return strings.Join(allow, ", ")
}

// route is one entry of the API: its pattern ("METHOD /path"), the roles
// whose keys may call it (none: no key needed) and its handler. The table
// is the one place routes are declared; the OpenAPI document is checked
// against it (openapi_test.go).
type route struct {
	pattern string
	roles   []access.Role
	handle  handlerFunc
	api     bool // under /v1: not served in worker mode
	etag    bool // a write to a resource with an entity tag: If-Match applies
	// keyInWrite: a write to an aggregate, all of whose work is one command
	// through the event store's transactor, to a reference record or the
	// merchant's settings (one write of internal/refdata), or to a webhook
	// endpoint or its deliveries (one write of the webhook store), an
	// erasure (its first pass, one transaction of the event store), or an
	// admin key's create, revoke or rotation (one transaction of the key
	// store, internal/refdata): a key known lately is checked in that
	// transaction (access.KeyCheck) rather than by a lookup first.
	keyInWrite bool
}

// isWrite reports whether a route's method writes: those take an
// Idempotency-Key.
func isWrite(pattern string) bool {
	method, path, _ := strings.Cut(pattern, " ")
	return strings.HasPrefix(path, "/v1/") && (method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch)
}

// routes lists every route the server serves.
func (s *server) routes() []route {
	op := []access.Role{access.Operator}
	opOrWorker := []access.Role{access.Operator, access.Worker}
	admin := []access.Role{access.Admin}
	v1 := func(pattern string, roles []access.Role, h handlerFunc) route {
		return route{pattern: pattern, roles: roles, handle: h, api: true}
	}
	// tagged is a write that states the version it read (If-Match or
	// expected_version); command, a write that checks its key in its
	// transaction (keyInWrite); versioned, both.
	tagged := func(pattern string, roles []access.Role, h handlerFunc) route {
		return route{pattern: pattern, roles: roles, handle: h, api: true, etag: true}
	}
	command := func(pattern string, roles []access.Role, h handlerFunc) route {
		return route{pattern: pattern, roles: roles, handle: h, api: true, keyInWrite: true}
	}
	versioned := func(pattern string, roles []access.Role, h handlerFunc) route {
		rt := tagged(pattern, roles, h)
		rt.keyInWrite = true
		return rt
	}
	rts := []route{
		{pattern: "GET /healthz", handle: s.healthz},
		{pattern: "GET /readyz", handle: s.readyz},
		{pattern: "GET /openapi.json", handle: serveOpenAPI},
		{pattern: "GET /openapi-3.0.json", handle: serveOpenAPI30},
		{pattern: "GET /metrics", handle: s.metrics},
		{pattern: "GET /admin/leadership", roles: admin, handle: s.configured(s.Leadership != nil, s.leadership)},
	}
	for _, rs := range s.referenceRoutes() {
		for _, rt := range rs {
			if isWrite(rt.pattern) { // one write of a record, which checks the key in its transaction
				rts = append(rts, command(rt.pattern, op, rt.handle))
				continue
			}
			rts = append(rts, v1(rt.pattern, op, rt.handle))
		}
	}
	rts = append(rts, s.webhookRoutes(
		func(pattern string, h handlerFunc) route { return v1(pattern, op, h) },
		func(pattern string, h handlerFunc) route { return command(pattern, op, h) },
		func(pattern string, h handlerFunc) route { return versioned(pattern, op, h) })...)
	return append(rts,
		command("POST /v1/service-requests", op, s.createServiceRequest),
		v1("GET /v1/service-requests", op, s.listServiceRequests),
		v1("GET /v1/service-requests/{id}", op, s.parkedHeader(aggregates.ServiceRequest.Projection, s.getServiceRequest)),
		versioned("PATCH /v1/service-requests/{id}", op, s.updateServiceRequest),
		versioned("POST /v1/service-requests/{id}/status", op, s.changeServiceRequestStatus),
		versioned("POST /v1/service-requests/{id}/convert", op, s.convertServiceRequest),
		v1("GET /v1/schedules", opOrWorker, s.listSchedules),
		v1("GET /v1/schedules/{id}", opOrWorker, s.parkedHeader(aggregates.Schedule.Projection, s.getSchedule)),
		versioned("POST /v1/schedules/{id}/status", opOrWorker, s.changeScheduleStatus),
		command("POST /v1/orders", op, s.createOrder),
		v1("GET /v1/orders", opOrWorker, s.listOrders),
		v1("GET /v1/orders/{id}", opOrWorker, s.parkedHeader(aggregates.Order.Projection, s.getOrder)),
		v1("GET /v1/orders/{id}/changes", op, s.orderChanges), // history, with earlier values and assignees: not a worker's
		versioned("PATCH /v1/orders/{id}", op, s.updateOrder),
		versioned("POST /v1/orders/{id}/status", op, s.changeOrderStatus),
		versioned("POST /v1/orders/{id}/cancel", op, s.cancelOrder),
		versioned("PUT /v1/orders/{id}/assignment", op, s.assignOrder),
		versioned("PUT /v1/orders/{id}/settlement", op, s.settleOrder),
		command("POST /v1/plans", op, s.createPlan),
		v1("GET /v1/plans", op, s.listPlans),
		v1("GET /v1/plans/{id}", op, s.parkedHeader(aggregates.Plan.Projection, s.getPlan)),
		v1("GET /v1/plans/{id}/visits", op, s.listPlanVisits),
		versioned("POST /v1/plans/{id}/change", op, s.changePlan),
		versioned("POST /v1/plans/{id}/skip", op, s.skipVisit),
		versioned("POST /v1/plans/{id}/move", op, s.moveVisit),
		versioned("POST /v1/plans/{id}/pause", op, s.planLifecycle(planLifecyclePause)),
		versioned("POST /v1/plans/{id}/resume", op, s.planLifecycle(planLifecycleResume)),
		versioned("POST /v1/plans/{id}/end", op, s.planLifecycle(planLifecycleEnd)),
		v1("GET /v1/settings", op, s.getSettings),
		command("PUT /v1/settings", op, s.putSettings), // one write of the merchant's row (internal/refdata)
		v1("GET /v1/staff/{id}/working-hours", op, s.getWorkingHours),
		versioned("PUT /v1/staff/{id}/working-hours", op, s.putWorkingHours),
		v1("GET /v1/availability", op, s.availability),
		v1("GET /v1/events", op, s.listEvents),
		v1("GET /v1/customers/{id}/export", op, s.configured(s.Exports != nil, s.oneExport(s.exportCustomer))),
		v1("GET /v1/staff/{id}/export", op, s.configured(s.StaffExports != nil, s.oneExport(s.exportStaffMember))),
		// An erasure's first pass is one transaction of the event store,
		// which checks the key first; the second pass runs whatever becomes
		// of the request (ops.Erasures.Erase), so only a key that worked
		// when the first pass began gets one.
		command("POST /v1/customers/{id}/erase", op, s.configured(s.Erasures != nil, s.eraseSubject(event.SubjectCustomer))),
		command("POST /v1/staff/{id}/erase", op, s.configured(s.Erasures != nil, s.eraseSubject(event.SubjectStaffMember))),
		v1("GET /admin/parked", admin, s.configured(s.Parked != nil, s.listParked)),
		v1("POST /admin/parked/replay", admin, s.configured(s.Parked != nil, s.replayAllParked)),
		v1("GET /admin/parked/{projection}/{id}", admin, s.configured(s.Parked != nil, s.getParked)),
		v1("POST /admin/parked/{projection}/{id}/replay", admin, s.configured(s.Parked != nil, s.replayParked)),
		v1("POST /admin/parked/{projection}/{id}/skip", admin, s.configured(s.Parked != nil, s.skipParked)),
		v1("POST /admin/rebuilds/{projection}", admin, s.configured(s.Rebuilds != nil, s.startRebuild)),
		v1("GET /admin/rebuilds/{projection}", admin, s.configured(s.Rebuilds != nil, s.rebuildStatus)),
		v1("DELETE /admin/rebuilds/{projection}", admin, s.configured(s.Rebuilds != nil, s.cancelRebuild)),
		v1("GET /admin/keys", admin, s.configured(s.Keys != nil, s.listKeys)),
		// One transaction of the key store each, which checks the key first.
		command("POST /admin/keys", admin, s.configured(s.Keys != nil, s.createKey)),
		command("POST /admin/keys/{id}/revoke", admin, s.configured(s.Keys != nil, s.revokeKey)),
		command("POST /admin/keys/{id}/rotate", admin, s.configured(s.Keys != nil, s.rotateKey)),
		v1("GET /admin/audit", admin, s.configured(s.Audit != nil, s.listAudit)),
	)
}

// configured answers 404 for a route whose dependency this instance was
// not given.
func (s *server) configured(ok bool, h handlerFunc) handlerFunc {
	if ok {
		return h
	}
	return func(http.ResponseWriter, *http.Request) error { return apperr.ErrNotFound }
}

// metrics serves Prometheus metrics, unauthenticated, when configured.
func (s *server) metrics(w http.ResponseWriter, r *http.Request) error {
	if s.Metrics == nil {
		return apperr.ErrNotFound
	}
	s.Metrics.ServeHTTP(w, r)
	return nil
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// readyz answers the instance's readiness: only its status without a key,
// and the details (mode, leadership, projections, the error) for an admin
// key.
// readyFor is how long one readiness check (a ping of each database)
// answers /readyz: a flood of /readyz costs the databases a few pings a
// second, not one per request.
const readyFor = 250 * time.Millisecond

// readiness is the last readiness check, shared by the /readyz requests
// of the next readyFor; one request at a time runs a new check, detached
// from that request: a probe that gives up (a load balancer's timeout)
// would otherwise fail the check for every probe sharing it.
type readiness struct {
	mu      sync.Mutex
	at      time.Time
	details map[string]any
	err     error
}

func (s *server) checkReady(ctx context.Context) (map[string]any, error) {
	s.ready.mu.Lock()
	defer s.ready.mu.Unlock()
	if now := s.Now(); s.ready.at.IsZero() || now.Sub(s.ready.at) >= readyFor {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyTimeout)
		defer cancel()
		s.ready.details, s.ready.err = s.Ready(ctx)
		s.ready.at = now
	}
	return maps.Clone(s.ready.details), s.ready.err
}

// readyTimeout bounds one readiness check: a database that does not answer
// is not ready.
const readyTimeout = 2 * time.Second

func (s *server) readyz(w http.ResponseWriter, r *http.Request) error {
	details, err := s.checkReady(r.Context())
	if !s.admin(r) {
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable"})
			return nil
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
		return nil
	}
	if details == nil {
		details = map[string]any{}
	}
	if err != nil {
		details["status"] = "unavailable"
		details["error"] = err.Error()
		writeJSON(w, http.StatusServiceUnavailable, details)
		return nil
	}
	details["status"] = "ready"
	writeJSON(w, http.StatusOK, details)
	return nil
}

// admin reports whether the request carries a valid admin key, resolved
// as every key is (the key cache, the client address's budget of unknown
// keys). Any other key, or none, or a refused or failed lookup, is simply
// not an admin.
func (s *server) admin(r *http.Request) bool {
	scheme, secret, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if s.Auth == nil || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		return false
	}
	p, _, err := s.resolve(r, strings.TrimSpace(secret), s.Now())
	return err == nil && p.Role == access.Admin
}

type principalKey struct{}

func principal(r *http.Request) access.Principal {
	p, _ := r.Context().Value(principalKey{}).(access.Principal)
	return p
}

// handlerFunc is an API handler that returns its error instead of writing
// it.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// auth authenticates the bearer key and lets only the given roles through:
// a missing or unknown key is 401, a known key of another role 403, a key
// over a limit 429 (limits.go). With no roles, the route is public: no key
// is asked for. On a route whose write checks its key in its transaction
// (keyInWrite), a key known lately is not looked up first (deferKey).
func (s *server) auth(keyInWrite bool, roles ...access.Role) func(handlerFunc) http.Handler {
	return func(h handlerFunc) http.Handler {
		if len(roles) == 0 {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := h(w, r); err != nil {
					s.writeError(w, r, err)
				}
			})
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Two lines are two keys: Header.Get would act as the first,
			// whichever the client meant (RFC 6750's invalid_request, 400).
			if len(r.Header.Values("Authorization")) > 1 {
				s.writeError(w, r, malformed("Authorization", "must be sent once, with one key"))
				return
			}
			scheme, secret, _ := strings.Cut(r.Header.Get("Authorization"), " ")
			secret = strings.TrimSpace(secret)
			if !strings.EqualFold(scheme, "Bearer") || secret == "" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="hearth"`)
				writeProblem(w, newProblem(http.StatusUnauthorized, "unauthenticated", "an API key is required: Authorization: Bearer <key>"))
				return
			}
			now := s.Now()
			p, gate := s.deferKey(keyInWrite, w, r, secret, now)
			release := func() {}
			defer func() { release() }() // the merchant's in-flight slot, once admitted
			if gate != nil {
				w = gate
				r = r.WithContext(access.WithKeyCheck(r.Context(), gate.check))
				// Settled before the slot is released, so that a refused key
				// is forgotten before anything else of it is admitted.
				defer gate.settle(now)
			} else {
				var ok bool
				if p, ok = s.authenticate(w, r, secret, now); !ok {
					return
				}
				if s.KeyUsed != nil {
					s.KeyUsed(p.KeyID)
				}
				// The key cache may have vouched for the key: a write to an
				// aggregate checks it in its transaction all the same, so a
				// key revoked before the write began writes nothing, whatever
				// the cache says (a write with an Idempotency-Key or Expect).
				if checker, ok := s.Auth.(keyChecker); ok && keyInWrite {
					check := checker.KeyCheck(p, secret)
					r = r.WithContext(access.WithKeyCheck(r.Context(), check))
					defer s.forgetRefused(secret, check)
				}
			}
			allowed := false
			for _, role := range roles {
				allowed = allowed || p.Role == role
			}
			if !allowed {
				writeProblem(w, newProblem(http.StatusForbidden, "forbidden",
					article(string(p.Role))+" key may not "+r.Method+" "+r.URL.Path))
				return
			}
			v := s.limits.admit(p, now)
			release = v.done
			if v.refused != "" {
				s.limits.writeRateLimited(w, v.refused, v.q)
				return
			}
			s.limits.setHeaders(w.Header(), v.q)
			// Before the read-your-writes wait and the Idempotency-Key's
			// claim, so that a request that says something it cannot mean
			// is neither answered late nor kept as a key's answer.
			if err := cmp.Or(s.checkQuery(r), s.checkHeaders(r)); err != nil {
				s.writeError(w, r, err)
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
			if r.Method == http.MethodGet && s.Reads != nil {
				r = r.WithContext(s.Reads.Route(r.Context()))
			}
			if !s.awaitPosition(w, r) {
				return
			}
			if err := h(w, r); err != nil {
				s.writeError(w, r, err)
			}
		})
	}
}

// authenticate resolves the secret through the key cache, or else through
// Auth if the client address's budget of unknown keys allows a lookup. It
// reports false when it has answered the request itself (401, 429, 500).
func (s *server) authenticate(w http.ResponseWriter, r *http.Request, secret string, now time.Time) (access.Principal, bool) {
	p, refused, err := s.resolve(r, secret, now)
	switch {
	case errors.Is(err, errLookupRefused):
		s.limits.writeRateLimited(w, limitClientAddress, refused)
		return access.Principal{}, false
	case errors.Is(err, apperr.ErrNotFound):
		refuseKey(w)
		return access.Principal{}, false
	case err != nil:
		s.writeError(w, r, err)
		return access.Principal{}, false
	}
	return p, true
}

// keyStillWorks resolves the request's key again, as any request's is
// (the key cache within KEY_CACHE_TTL, a lookup beyond), for a request that
// may have waited: a long poll authenticated when it came in, and a key
// revoked, expired or rotated away while it waited gets the 401 any request
// of that key now gets, not the events written since; so does a read that
// waited for a position (consistency.go). It reports false when it has
// answered the request itself.
func (s *server) keyStillWorks(w http.ResponseWriter, r *http.Request) bool {
	_, secret, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	_, ok := s.authenticate(w, r, strings.TrimSpace(secret), s.Now())
	return ok
}

// refuseKey answers a request whose key is unknown or no longer works.
func refuseKey(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="hearth", error="invalid_token"`)
	writeProblem(w, newProblem(http.StatusUnauthorized, "unauthenticated", "unknown or revoked API key"))
}

// errLookupRefused is a key that is not cached, from a client address whose
// budget of unknown keys is spent: it is not looked up.
var errLookupRefused = errors.New("key lookup refused: the client address's budget of unknown keys is spent")

// resolve finds the principal of secret: from the key cache, or by a lookup
// when the client address's budget of unknown keys allows one
// (errLookupRefused, with the refused quota, when it does not). An unknown
// key is apperr.ErrNotFound.
func (s *server) resolve(r *http.Request, secret string, now time.Time) (access.Principal, quota, error) {
	hash := sha256.Sum256([]byte(secret))
	p, ok, known := s.keyHits.get(hash, now)
	if ok {
		return p, quota{}, nil
	}
	done, refused, ok := s.limits.lookup(r, now)
	switch {
	case ok:
	case known: // authenticated lately: not one of a flood's made-up keys
		done = func(bool) {}
	default:
		return access.Principal{}, refused, errLookupRefused
	}
	p, err := s.Auth.Authenticate(r.Context(), secret)
	unknown := errors.Is(err, apperr.ErrNotFound)
	done(unknown)
	if unknown {
		s.keyHits.forget(hash)
	}
	if err != nil {
		return access.Principal{}, quota{}, err
	}
	s.keyHits.put(hash, p, now)
	return p, quota{}, nil
}

// meta describes the command a request causes.
func (s *server) meta(r *http.Request) event.Meta {
	p := principal(r)
	return event.Meta{
		MerchantID: p.MerchantID, Actor: p.Subject(), CorrelationID: correlationID(r),
		OccurredAt: event.Instant(s.Now()),
	}
}

type correlationKey struct{}

func correlationID(r *http.Request) string {
	id, _ := r.Context().Value(correlationKey{}).(string)
	return id
}

// pathID reads the {id} path value, which must be a UUID.
func pathID(r *http.Request) (string, error) { return pathUUID(r, "id") }

// pathUUID reads the path value name, which must be a UUID: every path id
// that is not one answers the same 400 /problems/invalid-id, naming it.
func pathUUID(r *http.Request, name string) (string, error) {
	id, ok := uuid.Parse(r.PathValue(name))
	if !ok {
		return "", &badRequest{slug: "invalid-id", detail: name + " in the path must be a UUID, got " + apperr.Quote(r.PathValue(name)),
			fields: []apperr.FieldError{{Field: name, Message: "must be a UUID"}}}
	}
	return id, nil
}

func (s *server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, s.MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

// statusRecorder notes the status of an answer, and whether it has started.
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusRecorder) WriteHeader(code int) {
	w.status, w.wrote = code, true
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// logRequests gives every request a correlation id (X-Correlation-ID when
// the client sends a sane one) and logs one line per request.
func (s *server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get("X-Correlation-ID")
		if id == "" || len(id) > 100 || strings.ContainsFunc(id, func(c rune) bool { return c < 0x21 || c > 0x7e }) {
			id = uuid.New()
		}
		w.Header().Set("X-Correlation-ID", id)
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), correlationKey{}, id)))
		s.log.DebugContext(r.Context(), "request", "method", r.Method, "path", r.URL.Path,
			"status", rec.status, "duration_ms", float64(time.Since(start).Microseconds())/1000, "correlation_id", id)
	})
}

// writeJSON answers v as JSON with status.
//
// A value that cannot be encoded (a time past the year 9999) is a bug: it
// panics before anything is written, so that recoverPanics logs it and
// answers 500, rather than send the status with a body that breaks off.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Errorf("encode the answer: %w", err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// article is word with its indefinite article: "an admin", "a worker".
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an " + word
	}
	return "a " + word
}
