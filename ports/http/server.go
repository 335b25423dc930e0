// Package httpport is Hearth's HTTP API: routing, authentication, decoding,
// and the mapping of application errors to problem+json. It calls the
// application only through app.Application.
package httpport

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"hearth/app"
	"hearth/app/access"
	"hearth/app/apperr"
	"hearth/app/event"
	"hearth/app/uuid"
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
	// Consistency makes a GET with a position wait for it (read your
	// writes). Optional: without it, positions are ignored.
	Consistency Consistency
	// ConsistencyTimeout bounds that wait. Defaults to 2s.
	ConsistencyTimeout time.Duration
}

type server struct {
	Config
	log *slog.Logger
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
	if cfg.Ready == nil {
		cfg.Ready = func(context.Context) (map[string]any, error) { return map[string]any{}, nil }
	}
	s := &server{Config: cfg, log: cfg.Log.With("component", "http")}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	if cfg.APIEnabled {
		op := s.auth(access.Operator)
		opOrWorker := s.auth(access.Operator, access.Worker)
		s.registerReference(mux, op)
		mux.Handle("POST /v1/service-requests", op(s.createServiceRequest))
		mux.Handle("GET /v1/service-requests", op(s.listServiceRequests))
		mux.Handle("GET /v1/service-requests/{id}", op(s.getServiceRequest))
		mux.Handle("PATCH /v1/service-requests/{id}", op(s.updateServiceRequest))
		mux.Handle("POST /v1/service-requests/{id}/status", op(s.changeServiceRequestStatus))
		mux.Handle("POST /v1/service-requests/{id}/convert", op(s.convertServiceRequest))
		mux.Handle("GET /v1/schedules", opOrWorker(s.listSchedules))
		mux.Handle("GET /v1/schedules/{id}", opOrWorker(s.getSchedule))
		mux.Handle("POST /v1/schedules/{id}/status", opOrWorker(s.changeScheduleStatus))
		mux.Handle("POST /v1/orders", op(s.createOrder))
		mux.Handle("GET /v1/orders", opOrWorker(s.listOrders))
		mux.Handle("GET /v1/orders/{id}", opOrWorker(s.getOrder))
		mux.Handle("GET /v1/orders/{id}/changes", opOrWorker(s.orderChanges))
		mux.Handle("PATCH /v1/orders/{id}", op(s.updateOrder))
		mux.Handle("POST /v1/orders/{id}/status", op(s.changeOrderStatus))
		mux.Handle("POST /v1/orders/{id}/cancel", op(s.cancelOrder))
		mux.Handle("PUT /v1/orders/{id}/assignment", op(s.assignOrder))
		mux.Handle("PUT /v1/orders/{id}/settlement", op(s.settleOrder))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, newProblem(http.StatusNotFound, "not-found", "no route for "+r.Method+" "+r.URL.Path))
	})
	return s.logRequests(s.limitBody(mux)), nil
}

func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	details, err := s.Ready(ctx)
	if details == nil {
		details = map[string]any{}
	}
	if err != nil {
		details["status"] = "unavailable"
		details["error"] = err.Error()
		writeJSON(w, http.StatusServiceUnavailable, details)
		return
	}
	details["status"] = "ready"
	writeJSON(w, http.StatusOK, details)
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
// a missing or unknown key is 401, a known key of another role 403.
func (s *server) auth(roles ...access.Role) func(handlerFunc) http.Handler {
	return func(h handlerFunc) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || strings.TrimSpace(secret) == "" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="hearth"`)
				writeProblem(w, newProblem(http.StatusUnauthorized, "unauthenticated", "an API key is required: Authorization: Bearer <key>"))
				return
			}
			p, err := s.Auth.Authenticate(r.Context(), strings.TrimSpace(secret))
			if errors.Is(err, apperr.ErrNotFound) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="hearth", error="invalid_token"`)
				writeProblem(w, newProblem(http.StatusUnauthorized, "unauthenticated", "unknown or revoked API key"))
				return
			}
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			allowed := false
			for _, role := range roles {
				allowed = allowed || p.Role == role
			}
			if !allowed {
				writeProblem(w, newProblem(http.StatusForbidden, "forbidden",
					"a "+string(p.Role)+" key may not "+r.Method+" "+r.URL.Path))
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
			if !s.awaitPosition(w, r) {
				return
			}
			if err := h(w, r); err != nil {
				s.writeError(w, r, err)
			}
		})
	}
}

// meta describes the command a request causes.
func (s *server) meta(r *http.Request) event.Meta {
	p := principal(r)
	return event.Meta{
		MerchantID: p.MerchantID, Actor: p.Subject(), CorrelationID: correlationID(r),
		OccurredAt: s.Now().UTC().Truncate(time.Microsecond), // Postgres keeps microseconds
	}
}

type correlationKey struct{}

func correlationID(r *http.Request) string {
	id, _ := r.Context().Value(correlationKey{}).(string)
	return id
}

// pathID reads the {id} path value, which must be a UUID.
func pathID(r *http.Request) (string, error) {
	id, ok := uuid.Parse(r.PathValue("id"))
	if !ok {
		return "", &badRequest{slug: "invalid-id", detail: "id in the path must be a UUID, got " + strconv.Quote(r.PathValue("id")),
			fields: []apperr.FieldError{{Field: "id", Message: "must be a UUID"}}}
	}
	return id, nil
}

func (s *server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, s.MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
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

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
