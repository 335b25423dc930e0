// Package tracing is Hearth's OpenTelemetry tracing: the tracer provider
// the settings ask for (OTLP over HTTP, or the console), and the trace
// context carried where a write goes on after its request: in a Watermill
// message's metadata (the projections, the relay) and in a webhook
// delivery's row (the dispatcher, later).
//
// Tracing is off unless the settings turn it on. Off, no provider is
// built and every component is handed a nil trace.Tracer: it starts no
// span, reads no trace header and writes no trace metadata.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Exporters.
const (
	ExporterNone    = "none"
	ExporterOTLP    = "otlp"
	ExporterConsole = "console"
)

// Name is the instrumentation scope of Hearth's spans.
const Name = "hearth"

// Config is what Start needs.
type Config struct {
	// Exporter is none, otlp or console. Defaults to none: no provider.
	Exporter string
	// Endpoint is the URL the OTLP exporter posts spans to, path included
	// (http://localhost:4318/v1/traces). Empty: the exporter's default.
	Endpoint string
	// ServiceName is the resource's service.name. Defaults to "hearth".
	ServiceName string
	// Sampler decides which traces are recorded. Defaults to
	// ParentBased(AlwaysSample), the SDK's.
	Sampler sdktrace.Sampler
	// Console is where the console exporter writes. Required for it.
	Console io.Writer
}

// Start returns the tracer provider cfg describes, or nil when tracing is
// off. Shut it down (Provider.Shutdown) to flush the spans still queued.
func Start(ctx context.Context, cfg Config) (*sdktrace.TracerProvider, error) {
	var exp sdktrace.SpanExporter
	var err error
	switch cfg.Exporter {
	case "", ExporterNone:
		return nil, nil
	case ExporterOTLP:
		// The other OTLP settings (headers, TLS, timeout, compression) the
		// exporter reads from the OTEL_EXPORTER_OTLP_* variables itself.
		var opts []otlptracehttp.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(cfg.Endpoint))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	case ExporterConsole:
		if cfg.Console == nil {
			return nil, errors.New("tracing.Start: Console is required by the console exporter")
		}
		exp, err = stdouttrace.New(stdouttrace.WithWriter(cfg.Console))
	default:
		return nil, fmt.Errorf("tracing.Start: unknown exporter %q", cfg.Exporter)
	}
	if err != nil {
		return nil, fmt.Errorf("trace exporter %s: %w", cfg.Exporter, err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "hearth"
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", name)))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	sampler := cfg.Sampler
	if sampler == nil {
		sampler = sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(sampler)), nil
}

// Tracer is Hearth's tracer of p; nil (tracing off) when p is nil.
func Tracer(p trace.TracerProvider) trace.Tracer {
	if p == nil {
		return nil
	}
	return p.Tracer(Name)
}

// propagator is the W3C Trace Context (traceparent, tracestate): what
// clients send, and what Hearth writes into messages and delivery rows.
var propagator propagation.TraceContext

// Inject writes the trace context of ctx's span into metadata (a
// Watermill message's: message.Metadata converts), when ctx has one.
func Inject(ctx context.Context, metadata map[string]string) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagator.Inject(ctx, propagation.MapCarrier(metadata))
	}
}

// Extract returns ctx with the remote span context metadata carries, if
// it carries one.
func Extract(ctx context.Context, metadata map[string]string) context.Context {
	return propagator.Extract(ctx, propagation.MapCarrier(metadata))
}

// InjectHeader is Inject into HTTP headers.
func InjectHeader(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagator.Inject(ctx, propagation.HeaderCarrier(h))
	}
}

// Parent is the traceparent of ctx's span ("" when it has none), for a
// row that a later step reads back with FromParent.
func Parent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}

// FromParent returns ctx with the remote span context of a traceparent
// Parent wrote ("": ctx as it is).
func FromParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// Links are links to the span contexts of several messages' metadata
// (those that carry one): a span that serves a batch links every write it
// serves.
func Links(metadata ...map[string]string) []trace.Link {
	var out []trace.Link
	for _, m := range metadata {
		if sc := trace.SpanContextFromContext(Extract(context.Background(), m)); sc.IsValid() {
			out = append(out, trace.Link{SpanContext: sc})
		}
	}
	return out
}

// End records err on span, if any, and ends it.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
