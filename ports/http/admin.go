package httpport

import (
	"context"
	"net/http"
	"time"

	"hearth/app/access"
)

// routeOperations adds the operations endpoints: GET /metrics (Prometheus,
// no authentication: expose it only where the scraper can reach it) and
// GET /admin/leadership (admin keys). Each is served only when its Config
// field is set.
func (s *server) routeOperations(mux *http.ServeMux) {
	if s.Metrics != nil {
		mux.Handle("GET /metrics", s.Metrics)
	}
	if s.Leadership != nil && s.Auth != nil {
		mux.Handle("GET /admin/leadership", s.auth(access.Admin)(s.leadership))
	}
}

// leadership answers this instance's leadership role, term and since when,
// and the current term as the database records it.
func (s *server) leadership(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	out, err := s.Leadership(ctx)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
