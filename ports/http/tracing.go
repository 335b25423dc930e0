package httpport

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceparent is the W3C Trace Context a client sends, so that its trace
// goes on through Hearth.
var traceparent propagation.TraceContext

// traceRequests gives every request a server span, child of the client's span
// when it sends a traceparent, named after its route ("POST /v1/orders")
// once the mux has matched it. Without a Tracer it is not in the chain.
func (s *server) traceRequests(next http.Handler) http.Handler {
	if s.Tracer == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := traceparent.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := s.Tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path),
				attribute.String("hearth.correlation_id", correlationID(r))))
		defer span.End()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		r = r.WithContext(ctx)
		next.ServeHTTP(rec, r) // the mux sets r.Pattern
		if r.Pattern != "" && r.Pattern != "/" {
			span.SetName(r.Pattern)
			span.SetAttributes(attribute.String("http.route", r.Pattern))
		}
		span.SetAttributes(attribute.Int("http.response.status_code", rec.status))
		if rec.status >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, http.StatusText(rec.status))
		}
	})
}
