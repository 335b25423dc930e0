package httpport

import (
	"fmt"
	"net/http"
	"runtime/debug"
)

// apiHeaders marks every answer as not to be cached (API answers are per
// key and change with every write) and not to be sniffed as another
// content type. A handler may set its own Cache-Control (/openapi.json).
func apiHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setAPIHeaders(w.Header())
		next.ServeHTTP(w, r)
	})
}

func setAPIHeaders(h http.Header) {
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
}

// recoverPanics answers a panicking handler with a 500 problem, without
// internals, and logs the panic with its stack, once. When the answer had
// already started, the connection is aborted instead (the client must not
// take half an answer for a whole one). Either way the server keeps
// serving.
func (s *server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler { // the sentinel, compared as net/http does
				panic(v)
			}
			s.log.ErrorContext(r.Context(), "handler panicked", "method", r.Method, "path", r.URL.Path,
				"correlation_id", correlationID(r), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if rec.wrote {
				panic(http.ErrAbortHandler)
			}
			h := w.Header()
			id := h.Get("X-Correlation-ID")
			clear(h) // nothing the handler set (ETag, Location, ...) belongs to this answer
			h.Set("X-Correlation-ID", id)
			setAPIHeaders(h)
			writeProblem(w, newProblem(http.StatusInternalServerError, "internal", "internal error; the server log has the details"))
		}()
		next.ServeHTTP(rec, r)
	})
}

// knownMethods are the methods the metrics name; any other is "other", so
// a client cannot grow the metrics' label set.
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// methodLabel is the method as the metrics name it.
func methodLabel(method string) string {
	if knownMethods[method] {
		return method
	}
	return "other"
}
