package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"hearth/app/command"
	"hearth/internal/pgtest"
)

// With a tracer, each publish is a span in the trace of the write that
// stored the event, a child of its append, and the JetStream message
// carries that trace on (header traceparent).
func TestRelayPublishesInTheTraceOfTheWrite(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	f.Store.SetTracer(tp.Tracer("test"))
	ctx, write := tp.Tracer("test").Start(context.Background(), "write")
	w, err := f.OrderCmds.Create(ctx, command.CreateOrder{Meta: f.Meta(), CustomerID: f.CustomerID, AmountCents: 500})
	require.NoError(t, err)
	write.End()
	eventID := w.Stream[0].ID

	cfg := f.config()
	cfg.Tracer = tp.Tracer("relay")
	f.startInstance(t, "traced", cfg)
	require.Eventually(t, func() bool { return f.streamCount() == 1 }, 30*time.Second, 20*time.Millisecond)
	m, err := f.js.GetMsg(stream, 1)
	require.NoError(t, err)
	require.Contains(t, m.Header.Get("traceparent"), write.SpanContext().TraceID().String())

	var publish, appendSpan tracetest.SpanStub
	for _, s := range exporter.GetSpans() {
		switch s.Name {
		case "hearth.relay.publish":
			publish = s
		case "hearth.append":
			appendSpan = s
		}
	}
	require.Equal(t, write.SpanContext().TraceID(), publish.SpanContext.TraceID(), "the publish is in the write's trace")
	require.Equal(t, appendSpan.SpanContext.SpanID(), publish.Parent.SpanID(), "a child of the append")
	require.Contains(t, publish.Attributes, attribute.String("messaging.message.id", eventID))
	require.Contains(t, m.Header.Get("traceparent"), publish.SpanContext.SpanID().String(), "JetStream's consumers continue the publish")
}
