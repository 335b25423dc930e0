package tracing_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"hearth/internal/tracing"
)

// Without a span in the context (tracing off), nothing is written and
// nothing allocated: the write path pays a context lookup per message.
func TestOffWritesNothing(t *testing.T) {
	ctx := context.Background()
	md := map[string]string{"type": "order.created"}
	allocs := testing.AllocsPerRun(100, func() {
		tracing.Inject(ctx, md)
		_ = tracing.Parent(ctx)
	})
	require.Equal(t, map[string]string{"type": "order.created"}, md)
	require.Empty(t, tracing.Parent(ctx))
	require.Zero(t, allocs)
	require.Nil(t, tracing.Tracer(nil))
	p, err := tracing.Start(ctx, tracing.Config{Exporter: tracing.ExporterNone})
	require.NoError(t, err)
	require.Nil(t, p, "no provider when off")
}

// What Inject writes, Extract reads back as the same span, remote; so do
// Parent and FromParent; Links link the messages that carry a context.
func TestTraceContextRoundTrips(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "write")
	defer span.End()
	want := span.SpanContext()

	md := map[string]string{}
	tracing.Inject(ctx, md)
	got := trace.SpanContextFromContext(tracing.Extract(context.Background(), md))
	require.True(t, got.IsRemote())
	require.True(t, got.Equal(want.WithRemote(true)), "%v != %v", got, want)

	parent := tracing.Parent(ctx)
	require.Equal(t, md["traceparent"], parent)
	got = trace.SpanContextFromContext(tracing.FromParent(context.Background(), parent))
	require.True(t, got.Equal(want.WithRemote(true)))
	require.False(t, trace.SpanContextFromContext(tracing.FromParent(context.Background(), "")).IsValid())

	links := tracing.Links(map[string]string{"type": "x"}, md)
	require.Len(t, links, 1, "only the message with a context")
	require.Equal(t, want.SpanID(), links[0].SpanContext.SpanID())
}
