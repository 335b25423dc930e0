package httpport

import (
	"net/http"
	"time"
)

// observe reports every request to ObserveRequest with its route pattern
// (as the mux matched it; "unmatched" for none), method (methodLabel),
// status and duration.
func (s *server) observe(next http.Handler) http.Handler {
	if s.ObserveRequest == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r) // the mux sets r.Pattern
		route := r.Pattern
		if route == "" || route == "/" {
			route = "unmatched"
		}
		s.ObserveRequest(methodLabel(r.Method), route, rec.status, time.Since(start))
	})
}
