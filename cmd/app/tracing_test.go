package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"io"
	"log/slog"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"hearth/internal/pgtest"
	"hearth/internal/tracing"
)

// clientTrace is the trace a client's request belongs to: its traceparent
// names the client's span, which Hearth's spans continue.
const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
	clientParent  = "00-" + clientTraceID + "-" + clientSpanID + "-01"
)

// tracedOrder creates an order with the client's traceparent, with a
// webhook endpoint of its merchant listening, and returns the delivery of
// its order.created.
func tracedOrder(t *testing.T, a *api) delivery {
	t.Helper()
	rc := newReceiver(t)
	a.createEndpoint(a.opA, rc.URL)
	customer := a.createCustomer(a.opA, "Traced Customer")
	header := auth(a.opA)
	header.Set("traceparent", clientParent)
	r, err := a.send(http.MethodPost, "/v1/orders", header, map[string]any{"customer_id": customer, "amount_cents": 1500})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r)
	order := r.Body["id"].(string)
	var got delivery
	require.Eventually(t, func() bool {
		i := slices.IndexFunc(rc.delivered(), func(d delivery) bool { return d.event.AggregateID == order })
		if i >= 0 {
			got = rc.delivered()[i]
		}
		return i >= 0
	}, 20*time.Second, 5*time.Millisecond, "the order's event is delivered")
	return got
}

// topicMetadata is the metadata of an event's message in the orders topic.
func topicMetadata(t *testing.T, a *api, eventID string) map[string]string {
	t.Helper()
	var raw []byte
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT metadata FROM watermill_orders WHERE uuid = $1`, eventID).Scan(&raw))
	var md map[string]string
	require.NoError(t, json.Unmarshal(raw, &md))
	return md
}

// deliveryTraceParent is the trace_parent of an event's delivery row.
func deliveryTraceParent(t *testing.T, a *api, eventID string) sql.NullString {
	t.Helper()
	var tp sql.NullString
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT trace_parent FROM webhook_deliveries WHERE event_id = $1`, eventID).Scan(&tp))
	return tp
}

// One write is one trace: the client's request span goes on into the
// command's transaction and its appends, across the Watermill message into
// the orders projection's apply and the webhook fan-out's, and through the
// delivery row into the delivery's attempt, whose request carries the
// trace on to the receiver.
func TestTracingFollowsAWriteToEveryConsumer(t *testing.T) {
	t.Parallel()
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	a := withWebhooks(t, pgtest.NewDB(t), func(cfg *Config) { cfg.Tracing.provider = tp })

	d := tracedOrder(t, a)
	require.Contains(t, d.header.Get("traceparent"), clientTraceID, "the receiver gets the trace")
	require.Contains(t, topicMetadata(t, a, d.event.ID)["traceparent"], clientTraceID, "the message carries the trace")

	// The delivery's span ends after the receiver has answered, and the
	// orders projection applies the event on its own, before or after the
	// delivery: wait for both.
	var spans tracetest.SpanStubs
	var deliver, project tracetest.SpanStub
	require.Eventually(t, func() bool {
		spans = exporter.GetSpans()
		i := slices.IndexFunc(spans, func(s tracetest.SpanStub) bool {
			return s.Name == "hearth.webhook.deliver" && attr(s, "hearth.event_id") == d.event.ID
		})
		j := slices.IndexFunc(spans, func(s tracetest.SpanStub) bool {
			return s.Name == "hearth.project" && attr(s, "hearth.projection") == "orders" && attr(s, "messaging.message.id") == d.event.ID
		})
		if i >= 0 && j >= 0 {
			deliver, project = spans[i], spans[j]
		}
		return i >= 0 && j >= 0
	}, 20*time.Second, 5*time.Millisecond, "the delivery and the orders projection's apply have spans")

	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	// parentOf is the span s is a child of, which must be of this trace.
	parentOf := func(s tracetest.SpanStub) tracetest.SpanStub {
		t.Helper()
		require.Equal(t, clientTraceID, s.SpanContext.TraceID().String(), "%s is in the client's trace", s.Name)
		p, ok := byID[s.Parent.SpanID()]
		require.True(t, ok, "%s's parent %s is one of Hearth's spans", s.Name, s.Parent.SpanID())
		return p
	}
	fanout := parentOf(deliver)
	require.Equal(t, "hearth.project", fanout.Name)
	require.Equal(t, "webhooks_orders", attr(fanout, "hearth.projection"))
	appendSpan := parentOf(fanout)
	require.Equal(t, "hearth.append", appendSpan.Name, "the fan-out continues the span that published the message")
	transaction := parentOf(appendSpan)
	require.Equal(t, "hearth.transaction", transaction.Name)
	request := parentOf(transaction)
	require.Equal(t, "POST /v1/orders", request.Name)
	require.Equal(t, trace.SpanKindServer, request.SpanKind)
	require.Equal(t, clientSpanID, request.Parent.SpanID().String(), "the request continues the client's span")
	require.True(t, request.Parent.IsRemote())

	require.Equal(t, request.SpanContext.TraceID(), project.SpanContext.TraceID(), "the orders projection's apply is in the trace")
	require.Equal(t, appendSpan.SpanContext.SpanID(), parentOf(project).SpanContext.SpanID(), "a child of the append")
}

// A test ping (a delivery an operator queues) is in the trace of the
// operator's request.
func TestTracingFollowsATestPing(t *testing.T) {
	t.Parallel()
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	a := withWebhooks(t, pgtest.NewDB(t), func(cfg *Config) { cfg.Tracing.provider = tp })
	rc := newReceiver(t)
	endpoint, _ := a.createEndpoint(a.opA, rc.URL)
	header := auth(a.opA)
	header.Set("traceparent", clientParent)
	r, err := a.send(http.MethodPost, "/v1/webhook-endpoints/"+endpoint+"/test", header, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r)
	awaitDelivered(t, rc, 1)
	require.Contains(t, rc.delivered()[0].header.Get("traceparent"), clientTraceID)
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(exporter.GetSpans(), func(s tracetest.SpanStub) bool {
			return s.Name == "hearth.webhook.deliver" && attr(s, "hearth.ping") == "true" && s.SpanContext.TraceID().String() == clientTraceID
		})
	}, 20*time.Second, 5*time.Millisecond, "the ping's attempt is a span of the operator's trace")
}

// Off, Hearth ignores a client's traceparent and writes no trace context:
// not into the message's metadata, not into the delivery row, not onto
// the webhook request.
func TestTracingOffWritesNoTraceContext(t *testing.T) {
	t.Parallel()
	a := withWebhooks(t, pgtest.NewDB(t), nil)
	require.Nil(t, a.w.tracer)

	d := tracedOrder(t, a)
	require.Empty(t, d.header.Get("traceparent"))
	md := topicMetadata(t, a, d.event.ID)
	require.NotEmpty(t, md["correlation_id"], "the metadata was read")
	for k := range md {
		require.NotContains(t, []string{"traceparent", "tracestate"}, k)
	}
	require.False(t, deliveryTraceParent(t, a, d.event.ID).Valid)
}

// attr is the value of a span's attribute, as text ("" when it has none).
func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == attribute.Key(key) {
			return kv.Value.Emit()
		}
	}
	return ""
}

// The OTEL_* settings: on and off, and every bad value named.
func TestLoadTracing(t *testing.T) {
	t.Parallel()
	load := func(vars map[string]string) (Tracing, error) {
		var errs []error
		tr := loadTracing(env(vars), &errs)
		return tr, errors.Join(errs...)
	}
	for _, c := range []struct {
		vars     map[string]string
		on       bool
		exporter string
		endpoint string
	}{
		{vars: nil},
		{vars: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
			exporter: "none", endpoint: "http://collector:4318/v1/traces"},
		{vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}, on: true, exporter: "otlp",
			endpoint: "http://collector:4318/v1/traces"},
		{vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://b/traces"},
			on: true, exporter: "otlp", endpoint: "https://b/traces"},
		{vars: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true, exporter: "otlp"},
		{vars: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, on: true, exporter: "console"},
		{vars: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, exporter: "none"},
	} {
		tr, err := load(c.vars)
		require.NoError(t, err, "%v", c.vars)
		require.Equal(t, c.on, tr.on(), "%v", c.vars)
		require.Equal(t, c.exporter, tr.Exporter, "%v", c.vars)
		require.Equal(t, c.endpoint, tr.Endpoint, "%v", c.vars)
	}
	tr, err := load(map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"})
	require.NoError(t, err)
	require.Equal(t, "ParentBased{root:TraceIDRatioBased{0.25},remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,"+
		"localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}", tr.Sampler.Description())
	for name, c := range map[string]struct {
		vars map[string]string
		want string
	}{
		"exporter":  {map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, `OTEL_TRACES_EXPORTER="jaeger": must be otlp, console or none`},
		"two":       {map[string]string{"OTEL_TRACES_EXPORTER": "otlp,console"}, `OTEL_TRACES_EXPORTER="otlp,console"`},
		"endpoint":  {map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, `OTEL_EXPORTER_OTLP_ENDPOINT: must be an http or https URL`},
		"protocol":  {map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, `OTEL_EXPORTER_OTLP_PROTOCOL="grpc": Hearth exports over http/protobuf only`},
		"sampler":   {map[string]string{"OTEL_TRACES_SAMPLER": "sometimes"}, `OTEL_TRACES_SAMPLER="sometimes": must be always_on`},
		"ratio":     {map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.5"}, `OTEL_TRACES_SAMPLER_ARG="1.5": must be a ratio from 0 to 1`},
		"disabled":  {map[string]string{"OTEL_SDK_DISABLED": "yes"}, `OTEL_SDK_DISABLED="yes": must be true or false`},
		"in config": {map[string]string{"DATABASE_URL": testDatabaseURL, "OTEL_TRACES_SAMPLER": "nope"}, `OTEL_TRACES_SAMPLER="nope"`},
	} {
		var err error
		if name == "in config" { // reported with the rest of the configuration
			_, _, err = loadConfig(env(c.vars), flag.NewFlagSet("serve", flag.ContinueOnError), nil)
		} else {
			_, err = load(c.vars)
		}
		require.ErrorContains(t, err, c.want, name)
	}
}

// The OTLP exporter's own settings, which it would skip with a log line,
// stop Hearth at start-up when exporting over OTLP, each named, and a
// header's value is never repeated; good ones pass, and tracing off leaves
// them unread.
func TestLoadTracingChecksTheExportersOwnSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile, notPEM := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "notes.txt")
	writeCertificate(t, certFile, keyFile)
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))
	load := func(vars map[string]string) error {
		var errs []error
		loadTracing(env(vars), &errs)
		return errors.Join(errs...)
	}
	otlp := func(more map[string]string) map[string]string {
		vars := map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}
		maps.Copy(vars, more)
		return vars
	}

	require.NoError(t, load(otlp(map[string]string{
		"OTEL_EXPORTER_OTLP_HEADERS": "api-key=abc%20def, X-Tenant = 1", "OTEL_EXPORTER_OTLP_TIMEOUT": "5000",
		"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip", "OTEL_EXPORTER_OTLP_INSECURE": "TRUE",
		"OTEL_EXPORTER_OTLP_CERTIFICATE": certFile, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": certFile, "OTEL_EXPORTER_OTLP_CLIENT_KEY": keyFile})))
	require.NoError(t, load(map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}), "unread while tracing is off")

	for name, c := range map[string]struct {
		vars map[string]string
		want string
	}{
		"header without =":  {map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "api-key=secret-value,broken"}, `OTEL_EXPORTER_OTLP_HEADERS: entry 2 must be key=value`},
		"header name":       {map[string]string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "bad key=secret-value"}, `OTEL_EXPORTER_OTLP_TRACES_HEADERS: entry 1 must be key=value`},
		"header value":      {map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "api-key=secret-value%zz"}, `OTEL_EXPORTER_OTLP_HEADERS: entry 1 (key "api-key")`},
		"timeout":           {map[string]string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "10s"}, `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT="10s": must be a whole number of milliseconds`},
		"negative timeout":  {map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "-1"}, `OTEL_EXPORTER_OTLP_TIMEOUT="-1"`},
		"compression":       {map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, `OTEL_EXPORTER_OTLP_COMPRESSION="zstd": must be gzip or none`},
		"insecure":          {map[string]string{"OTEL_EXPORTER_OTLP_INSECURE": "yes"}, `OTEL_EXPORTER_OTLP_INSECURE="yes": must be true or false`},
		"no CA file":        {map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": filepath.Join(dir, "missing.pem")}, `OTEL_EXPORTER_OTLP_CERTIFICATE="` + filepath.Join(dir, "missing.pem") + `": open`},
		"CA not PEM":        {map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": notPEM}, `OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE="` + notPEM + `": holds no PEM certificate`},
		"client cert alone": {map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": certFile}, `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY: set both or neither`},
		"client pair":       {map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": certFile, "OTEL_EXPORTER_OTLP_CLIENT_KEY": notPEM}, `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY: not a certificate and its key`},
		"by its endpoint":   {map[string]string{"OTEL_TRACES_EXPORTER": "", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, `OTEL_EXPORTER_OTLP_TIMEOUT="soon"`},
	} {
		err := load(otlp(c.vars))
		require.ErrorContains(t, err, c.want, name)
		require.NotContains(t, err.Error(), "secret-value", "%s: a header's value is not repeated", name)
	}
}

// The client key's setting names a file; one set to the key itself (its
// PEM, as some tools take it) is refused without being repeated: a
// start-up error ends in the logs.
func TestLoadTracingNeverRepeatsAClientKeyForItsFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeCertificate(t, certFile, keyFile)
	keyPEM, err := os.ReadFile(keyFile)
	require.NoError(t, err)
	block, _ := pem.Decode(keyPEM)
	require.NotNil(t, block)
	material := base64.StdEncoding.EncodeToString(block.Bytes)[:40]
	for _, prefix := range []string{"OTEL_EXPORTER_OTLP_", "OTEL_EXPORTER_OTLP_TRACES_"} {
		var errs []error
		loadTracing(env(map[string]string{"OTEL_TRACES_EXPORTER": "otlp",
			prefix + "CLIENT_CERTIFICATE": certFile, prefix + "CLIENT_KEY": string(keyPEM)}), &errs)
		err := errors.Join(errs...)
		require.ErrorContains(t, err, prefix+"CLIENT_KEY")
		require.NotContains(t, err.Error(), material, "the key stays out of the message")
	}
}

// writeCertificate writes a self-signed certificate and its key, PEM.
func writeCertificate(t *testing.T, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "collector"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
}

// Hearth started with tracing on exports its spans over OTLP/HTTP, and
// flushes those still queued when it stops.
func TestTracingExportsOverOTLP(t *testing.T) {
	t.Parallel()
	posts := make(chan string, 100)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		posts <- r.Method + " " + r.URL.Path + " " + r.Header.Get("Content-Type")
	}))
	t.Cleanup(collector.Close)
	cfg, stop, err := startTracing(t.Context(), Config{Tracing: Tracing{Exporter: tracing.ExporterOTLP, Endpoint: collector.URL + "/v1/traces"}},
		slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	_, span := cfg.Tracing.tracer().Start(t.Context(), "hearth.test")
	span.End()
	stop() // the batch goes now, not after the batcher's delay
	select {
	case post := <-posts:
		require.Equal(t, "POST /v1/traces application/x-protobuf", post)
	default:
		t.Fatal("the span was not exported by shutdown")
	}
}

// The start-up line that says tracing is on names where spans go, never a
// credential the endpoint's URL may carry: a password before its host, or
// a token in its query (the exporter sends neither: it posts to the URL's
// scheme, host and path alone).
func TestTracingOnLineNamesNoCredential(t *testing.T) {
	t.Parallel()
	var errs []error
	tr := loadTracing(env(map[string]string{
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://user:otlpPASSWORD@otlp.example.com:4318/v1/traces?api-key=otlpTOKEN",
	}), &errs)
	require.Empty(t, errs)
	var logs syncBuffer
	_, stop, err := startTracing(t.Context(), Config{Tracing: tr}, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	stop()
	require.Contains(t, logs.String(), "msg=\"tracing on\"")
	require.Contains(t, logs.String(), "otlp.example.com:4318/v1/traces", "where the spans go")
	require.NotContains(t, logs.String(), "otlpPASSWORD")
	require.NotContains(t, logs.String(), "otlpTOKEN")
}
