package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/net/http/httpguts"

	"hearth/internal/tracing"
)

// Tracing is the OpenTelemetry tracing settings, read from the standard
// OTEL_* variables (docs/operations.md, "Tracing"). Tracing is on when
// OTEL_TRACES_EXPORTER is otlp or console, or when it is unset and an OTLP
// endpoint is (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); OTEL_SDK_DISABLED=true turns it
// off whatever the rest says. Off is the default: unlike the SDK's own
// default (otlp to localhost), no exporter is started and nothing is
// traced.
type Tracing struct {
	// Exporter is none, otlp (OTLP over HTTP/protobuf) or console (spans
	// as JSON lines on stderr) (OTEL_TRACES_EXPORTER). Defaults to none,
	// or otlp when an OTLP endpoint is set.
	Exporter string
	// Endpoint is where spans are posted, path included:
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, or
	// OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces. Defaults to the exporter's
	// (http://localhost:4318/v1/traces).
	Endpoint string
	// ServiceName is the spans' service.name (OTEL_SERVICE_NAME). Defaults
	// to "" (tracing.Start's default, "hearth").
	ServiceName string
	// Sampler is OTEL_TRACES_SAMPLER with OTEL_TRACES_SAMPLER_ARG (a ratio
	// from 0 to 1 for the traceidratio samplers). Defaults to nil
	// (tracing.Start's default, parentbased_always_on: every trace a client
	// did not mark unsampled).
	Sampler sdktrace.Sampler

	// provider, when set, is used instead of one Start makes (tests: an
	// in-memory exporter).
	provider trace.TracerProvider
}

// on reports whether tracing is on.
func (t Tracing) on() bool {
	return t.provider != nil || (t.Exporter != "" && t.Exporter != tracing.ExporterNone)
}

// loadTracing reads the tracing settings; each error names its variable.
func loadTracing(getenv func(string) string, errs *[]error) Tracing {
	var t Tracing
	endpoint := func(name string) string {
		v := getenv(name)
		if v == "" {
			return ""
		}
		if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			// Not repeated: a URL may carry a password before its host.
			*errs = append(*errs, fmt.Errorf("%s: must be an http or https URL, such as http://localhost:4318", name))
		}
		return v
	}
	if v := endpoint("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); v != "" {
		t.Endpoint = v
	} else if v := endpoint("OTEL_EXPORTER_OTLP_ENDPOINT"); v != "" {
		t.Endpoint = strings.TrimSuffix(v, "/") + "/v1/traces"
	}
	switch v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v {
	case "":
		if t.Endpoint != "" {
			t.Exporter = tracing.ExporterOTLP
		}
	case tracing.ExporterNone, tracing.ExporterOTLP, tracing.ExporterConsole:
		t.Exporter = v
	default:
		*errs = append(*errs, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: must be otlp, console or none (one exporter)", v))
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := getenv(name); v != "" && v != "http/protobuf" {
			*errs = append(*errs, fmt.Errorf("%s=%q: Hearth exports over http/protobuf only (an OTLP receiver's port 4318)", name, v))
		}
	}
	switch v := getenv("OTEL_SDK_DISABLED"); v {
	case "", "false":
	case "true":
		t.Exporter = tracing.ExporterNone
	default:
		*errs = append(*errs, fmt.Errorf("OTEL_SDK_DISABLED=%q: must be true or false", v))
	}
	t.ServiceName = getenv("OTEL_SERVICE_NAME")
	t.Sampler = sampler(getenv("OTEL_TRACES_SAMPLER"), getenv("OTEL_TRACES_SAMPLER_ARG"), errs)
	if t.Exporter == tracing.ExporterOTLP {
		for _, prefix := range []string{"OTEL_EXPORTER_OTLP_", "OTEL_EXPORTER_OTLP_TRACES_"} {
			checkOTLPExporter(getenv, prefix, errs)
		}
	}
	return t
}

// checkOTLPExporter checks the OTLP exporter's own settings under prefix,
// which the exporter reads itself: it skips a value it cannot read with
// no more than a log line (a header dropped, a CA file ignored, so the
// system's roots are trusted instead), where Hearth stops at start-up and
// names it. It reads them as the exporter does. A header's value is never
// repeated in a message: it is often a credential.
func checkOTLPExporter(getenv func(string) string, prefix string, errs *[]error) {
	get := func(name string) (string, string) {
		return prefix + name, strings.TrimSpace(getenv(prefix + name))
	}
	if name, v := get("HEADERS"); v != "" {
		for i, pair := range strings.Split(v, ",") {
			key, value, found := strings.Cut(pair, "=")
			key = strings.TrimSpace(key)
			_, err := url.PathUnescape(value)
			switch {
			case !found || !httpguts.ValidHeaderFieldName(key):
				// Nothing of the entry is repeated: without its '=' (written
				// "Authorization: Bearer ..."), its key is the credential.
				*errs = append(*errs, fmt.Errorf("%s: entry %d must be key=value (not Name: value), a header name and its URL-encoded value, entries separated by commas", name, i+1))
			case err != nil:
				*errs = append(*errs, fmt.Errorf("%s: entry %d (key %q): its value must be URL-encoded", name, i+1, key))
			}
		}
	}
	if name, v := get("TIMEOUT"); v != "" {
		if ms, err := strconv.Atoi(v); err != nil || ms < 0 {
			*errs = append(*errs, fmt.Errorf("%s=%q: must be a whole number of milliseconds, such as 10000", name, v))
		}
	}
	if name, v := get("COMPRESSION"); v != "" && v != "gzip" && v != "none" {
		*errs = append(*errs, fmt.Errorf("%s=%q: must be gzip or none", name, v))
	}
	if name, v := get("INSECURE"); v != "" && !strings.EqualFold(v, "true") && !strings.EqualFold(v, "false") {
		*errs = append(*errs, fmt.Errorf("%s=%q: must be true or false", name, v))
	}
	if name, v := get("CERTIFICATE"); v != "" {
		if pem, err := readSettingFile(name, v); err != nil {
			*errs = append(*errs, err)
		} else if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			*errs = append(*errs, fmt.Errorf("%s=%q: holds no PEM certificate", name, v))
		}
	}
	certName, cert := get("CLIENT_CERTIFICATE")
	keyName, key := get("CLIENT_KEY")
	switch {
	case cert == "" && key == "":
	case cert == "" || key == "":
		*errs = append(*errs, fmt.Errorf("%s and %s: set both or neither", certName, keyName))
	default:
		certPEM, err := readSettingFile(certName, cert)
		if err != nil {
			*errs = append(*errs, err)
			return
		}
		keyPEM, err := readSettingFile(keyName, key)
		if err != nil {
			*errs = append(*errs, err)
			return
		}
		if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
			*errs = append(*errs, fmt.Errorf("%s and %s: not a certificate and its key: %w", certName, keyName, err))
		}
	}
}

// readSettingFile reads the file the setting name names. A value that is
// no file name but PEM (a client's private key set where its file's name
// goes, as some tools take it) is not repeated in the error, nor is the
// name os.ReadFile's error carries.
func readSettingFile(name, v string) ([]byte, error) {
	b, err := os.ReadFile(v)
	var pathErr *fs.PathError
	switch {
	case err == nil:
		return b, nil
	case (strings.Contains(v, "-----BEGIN") || strings.ContainsAny(v, "\r\n")) && errors.As(err, &pathErr):
		return nil, fmt.Errorf("%s: %v: it names a PEM file, and holds what reads as PEM itself", name, pathErr.Err)
	}
	return nil, fmt.Errorf("%s=%q: %w", name, v, err)
}

// sampler reads OTEL_TRACES_SAMPLER and its argument.
func sampler(name, arg string, errs *[]error) sdktrace.Sampler {
	ratio := func() float64 {
		if arg == "" {
			return 1
		}
		f, err := strconv.ParseFloat(arg, 64)
		if err != nil || f < 0 || f > 1 {
			*errs = append(*errs, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: must be a ratio from 0 to 1", arg))
			return 1
		}
		return f
	}
	switch name {
	case "":
		return nil
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample())
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio())
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio()))
	}
	*errs = append(*errs, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: must be always_on, always_off, traceidratio, "+
		"parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name))
	return nil
}

// startTracing starts the tracer provider cfg asks for, when tracing is on,
// and returns the settings with it, and the shutdown that flushes the
// spans still queued (at most shutdownWait).
func startTracing(ctx context.Context, cfg Config, log *slog.Logger) (Config, func(), error) {
	if cfg.Tracing.provider != nil || !cfg.Tracing.on() {
		return cfg, func() {}, nil
	}
	tp, err := tracing.Start(ctx, tracing.Config{Exporter: cfg.Tracing.Exporter, Endpoint: cfg.Tracing.Endpoint,
		ServiceName: cfg.Tracing.ServiceName, Sampler: cfg.Tracing.Sampler, Console: os.Stderr})
	if err != nil {
		return cfg, nil, err
	}
	sampler := "parentbased_always_on"
	if cfg.Tracing.Sampler != nil {
		sampler = cfg.Tracing.Sampler.Description()
	}
	log.Info("tracing on", "exporter", cfg.Tracing.Exporter, "endpoint", redactedURL(cfg.Tracing.Endpoint), "sampler", sampler)
	cfg.Tracing.provider = tp
	return cfg, func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownWait)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("flush traces", "error", err)
		}
	}, nil
}

// shutdownWait bounds the flush of the spans queued at shutdown: an OTLP
// receiver that is down must not hold the process.
const shutdownWait = 5 * time.Second

// tracer is Hearth's tracer under cfg; nil when tracing is off.
func (t Tracing) tracer() trace.Tracer { return tracing.Tracer(t.provider) }
