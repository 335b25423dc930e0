package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"

	"hearth/domain/webhook"
	"hearth/internal/keyring"
	httpport "hearth/ports/http"
)

// Config is every setting of Hearth. It is read here, from the environment
// and flags, and nowhere else.
type Config struct {
	// DatabaseURL is the event store: events, Watermill tables, keys and
	// reference data (DATABASE_URL). Required, except for `app dev`, which
	// starts a throwaway cluster when it is unset.
	DatabaseURL string
	// ReadModelDatabaseURL holds the read models (READMODEL_DATABASE_URL).
	// Defaults to DatabaseURL.
	ReadModelDatabaseURL string
	// ReadReplicas are the read replicas the API's GETs read from
	// (READ_REPLICA_URLS and the rest; replicas.go).
	ReadReplicas ReadReplicas
	// HTTPAddr is where the HTTP server listens (HTTP_ADDR or --http-addr).
	// Defaults to ":8080".
	HTTPAddr string
	// Mode is api (HTTP only), worker (projections, plus health endpoints) or
	// all (both) (MODE or --mode). Defaults to "all".
	Mode string
	// LogFormat is text or json (LOG_FORMAT). Defaults to "text".
	LogFormat string
	// LogLevel is debug, info, warn or error (LOG_LEVEL). Defaults to "info".
	LogLevel string
	// PollInterval is how often an idle projection subscriber looks for new
	// events (POLL_INTERVAL, a Go duration). Defaults to 100ms.
	PollInterval time.Duration
	// ShutdownTimeout bounds the graceful shutdown (SHUTDOWN_TIMEOUT).
	// Defaults to 20s.
	ShutdownTimeout time.Duration
	// ConsistencyTimeout bounds how long a GET waits for the position it
	// names (CONSISTENCY_TIMEOUT, at most 30s). Defaults to 2s.
	ConsistencyTimeout time.Duration
	// IdempotencyKeep is how long an Idempotency-Key and its answer are
	// kept, after which a retry with it runs as a new request
	// (IDEMPOTENCY_KEEP, at least 24h). Defaults to 24h.
	IdempotencyKeep time.Duration
	// TopicRetention is how long a message stays in its Watermill topic
	// table once every consumer group has acknowledged it; the worker then
	// deletes it, in small batches (TOPIC_RETENTION, a Go duration; 0 keeps
	// every message for ever). The events table, which verify and rebuild
	// read, is never pruned. Defaults to 168h (7 days).
	TopicRetention time.Duration
	// KeyLastUsedFlush is how often the API writes the keys' last_used_at,
	// in one statement for all keys used since (KEY_LAST_USED_FLUSH, a Go
	// duration, at most 1h). Defaults to 30s.
	KeyLastUsedFlush time.Duration
	// ConsistencyMaxWaits caps the read-your-writes waits in flight
	// (CONSISTENCY_MAX_WAITS); a GET over the cap answers at once with
	// Consistency-Status: skipped. Defaults to 256.
	ConsistencyMaxWaits int
	// EventFeedWait is the longest a read of the event feed (GET
	// /v1/events) waits for an event when there is none (EVENT_FEED_WAIT,
	// a Go duration, at most 60s); a request's wait parameter may shorten
	// it. Defaults to 20s, below the idle timeout of common proxies and load
	// balancers (60s).
	EventFeedWait time.Duration
	// EventFeedMaxWaits caps the event feed's long polls in flight
	// (EVENT_FEED_MAX_WAITS); over the cap a read answers at once, 503 when
	// it has nothing. A waiting poll holds no database connection.
	// Defaults to 256.
	EventFeedMaxWaits int
	// ExportMaxInFlight caps the exports (GET /v1/customers/{id}/export,
	// GET /v1/staff/{id}/export) built at once per API instance
	// (EXPORT_MAX_IN_FLIGHT): each is held whole in memory until its answer
	// is written. Over it an export answers 503 at once, and over half of it
	// (at least 1) for one merchant 429. Defaults to 2.
	ExportMaxInFlight int
	// RequestStatementTimeout is the statement_timeout of the request
	// path's database sessions (REQUEST_STATEMENT_TIMEOUT): a query of an
	// HTTP request that runs longer is cancelled and the request answers
	// 503. The projections, catch-up, rebuild and verify use their own
	// pools without it. Defaults to 5s.
	RequestStatementTimeout time.Duration
	// HTTPReadTimeout bounds reading a whole request, headers and body
	// (HTTP_READ_TIMEOUT); the headers alone get at most 5s. Defaults to
	// 30s.
	HTTPReadTimeout time.Duration
	// HTTPWriteTimeout bounds writing an answer, from the end of its
	// request's headers (HTTP_WRITE_TIMEOUT). It must exceed the longer of
	// CONSISTENCY_TIMEOUT and EVENT_FEED_WAIT plus REQUEST_STATEMENT_TIMEOUT,
	// the longest legitimate answer (a wait, then the read). Defaults to
	// max(CONSISTENCY_TIMEOUT, EVENT_FEED_WAIT) + 2 x
	// REQUEST_STATEMENT_TIMEOUT + 20s (50s with the other defaults).
	HTTPWriteTimeout time.Duration
	// HTTPIdleTimeout closes a keep-alive connection idle that long
	// (HTTP_IDLE_TIMEOUT). Defaults to 120s.
	HTTPIdleTimeout time.Duration
	// HTTPMaxConnectionsPerAddress caps the connections one client address
	// (IPv6: /64; a TRUSTED_PROXIES peer is not capped) holds open at once
	// on each listener (HTTP_MAX_CONNECTIONS_PER_ADDRESS): each holds a file
	// descriptor and memory however idle. A connection over it is answered
	// 429 and closed. Defaults to 1024; 0 turns it off.
	HTTPMaxConnectionsPerAddress int
	// AdminAddr, when set, is a second listener that serves /metrics and
	// /admin/* (and /healthz, /readyz); the public listener (HTTP_ADDR) then
	// answers 404 for them (ADMIN_ADDR, host:port). Defaults to "" (one
	// listener serves everything).
	AdminAddr string

	// Fair share (docs/api.md, "Rate limits"). A rate or a cap of 0 turns that
	// limit off.

	// KeyRPS is each API key's sustained rate in requests per second
	// (RATE_LIMIT_KEY_RPS). Defaults to 50.
	KeyRPS float64
	// KeyBurst is the size of each key's token bucket (RATE_LIMIT_KEY_BURST).
	// Defaults to 100.
	KeyBurst int
	// MerchantRPS is each merchant's rate, shared by all its keys
	// (RATE_LIMIT_MERCHANT_RPS). Defaults to 100.
	MerchantRPS float64
	// MerchantBurst is the size of each merchant's token bucket
	// (RATE_LIMIT_MERCHANT_BURST). Defaults to 200.
	MerchantBurst int
	// MerchantInFlight caps each merchant's requests in flight
	// (RATE_LIMIT_MERCHANT_IN_FLIGHT); one more is answered 429 at once.
	// Defaults to 10, half the database pool of 20, so that one merchant
	// never holds the whole pool.
	MerchantInFlight int
	// UnknownKeyRPS is the rate of failed authentications (unknown or
	// revoked keys) a client address may make (RATE_LIMIT_UNKNOWN_KEY_RPS);
	// past it, its uncached keys are answered 429 without a lookup.
	// Defaults to 1.
	UnknownKeyRPS float64
	// UnknownKeyBurst is that budget's bucket (RATE_LIMIT_UNKNOWN_KEY_BURST).
	// Defaults to 20.
	UnknownKeyBurst int
	// KeyCacheTTL is how long a known key is cached; a revoked key stops
	// working within it (KEY_CACHE_TTL, a Go duration, at most 5m; 0 turns
	// the cache off). Defaults to 5s.
	KeyCacheTTL time.Duration
	// TrustedProxies are the proxies whose X-Forwarded-For names the client
	// address (TRUSTED_PROXIES, comma-separated IPs or CIDRs). Defaults to
	// none: the header is ignored.
	TrustedProxies []netip.Prefix

	// Webhooks (docs/api.md, "Webhooks").

	// WebhookRetryFor is how long a failing delivery is retried, from its
	// first attempt; then its endpoint is disabled, with the reason
	// (WEBHOOK_RETRY_FOR). Defaults to 24h.
	WebhookRetryFor time.Duration
	// WebhookRetryInitial is the wait after a delivery's first failed
	// attempt; each further failure doubles it, up to WebhookRetryMax, and
	// each wait is spread by +-50 % (WEBHOOK_RETRY_INITIAL). Defaults to 10s.
	WebhookRetryInitial time.Duration
	// WebhookRetryMax caps the wait between two attempts, before the spread
	// (WEBHOOK_RETRY_MAX). Defaults to 1h.
	WebhookRetryMax time.Duration
	// PlanHorizon is how far ahead the visit generator turns service plans
	// into orders and schedules (PLAN_HORIZON, 1h to 1 year). Defaults to
	// 8 weeks (1344h).
	PlanHorizon time.Duration
	// PlanInterval is how often the visit generator's leader runs over
	// every plan (PLAN_INTERVAL, 1s to 24h, at most half PLAN_HORIZON).
	// Defaults to 1m.
	PlanInterval time.Duration
	// PlanMerchantShare is the most plans of one merchant a round of the
	// visit generator runs (PLAN_MERCHANT_SHARE); a merchant with more has
	// the others run in the next rounds, so that one merchant's plans
	// cannot lengthen every other merchant's wait for a round. Defaults to
	// 1000; 0: every plan every round.
	PlanMerchantShare int
	// WebhookTimeout bounds one delivery attempt, from dialling to the end
	// of the answer (WEBHOOK_TIMEOUT, at most 1m). Defaults to 10s.
	WebhookTimeout time.Duration
	// WebhookAllowPrivate lets endpoints and deliveries reach loopback,
	// private and link-local addresses (WEBHOOK_ALLOW_PRIVATE, true or
	// false): for receivers inside one's own network, and tests. Defaults to
	// false: such targets are refused when an endpoint is saved and again
	// at every connection.
	WebhookAllowPrivate bool
	// MasterKeys seal what Hearth keeps secret at rest: webhook signing
	// secrets (docs/personal-data.md). MASTER_KEY holds one or more ID:KEY
	// lines (comma-separated; the first seals, the others only open what
	// they sealed until `app keyring rewrap`), or MASTER_KEY_FILE names a
	// file of such lines. Required by serve; `app dev` makes a throwaway one
	// under .data/ when neither is set.
	MasterKeys *keyring.Ring
	// SealingOff appends the personal fields of new events in clear
	// (PERSONAL_DATA_SEALING, on or off), for measuring the cost of sealing
	// only: events written while it is off are in clear and erasure cannot
	// reach their text. Sealed events, old or new, still open. Defaults to
	// on (false here).
	SealingOff bool
	// WebhookDeliveryKeep is how long a finished delivery stays in the
	// delivery log (WEBHOOK_DELIVERY_KEEP). Defaults to 168h (7 days).
	WebhookDeliveryKeep time.Duration
	// The relay to NATS JetStream (docs/operations.md, "Relay to NATS
	// JetStream"): it runs on the worker that holds its own lock.

	// RelayNATSURL is the NATS server the relay publishes every event to
	// (RELAY_NATS_URL, nats://host:port; comma-separated for a cluster).
	// Defaults to "": no relay. `app dev` starts a throwaway nats-server
	// when it is unset and nats-server is installed.
	RelayNATSURL string
	// RelayStream is the JetStream stream the relay publishes to, created
	// when missing (RELAY_STREAM). Defaults to "HEARTH".
	RelayStream string
	// RelaySubjectPrefix begins every subject the relay publishes on:
	// PREFIX.<merchant_id>.<type>, e.g. hearth.<id>.order.created; the
	// stream takes PREFIX.>
	// (RELAY_SUBJECT_PREFIX). Defaults to "hearth".
	RelaySubjectPrefix string
	// RelayDuplicateWindow is the stream's duplicate window: JetStream drops
	// a message whose Nats-Msg-Id (the event id) it has stored within it, so
	// a page the relay publishes again after a takeover or a restart adds
	// nothing (RELAY_DUPLICATE_WINDOW, a Go duration). It costs the NATS
	// server memory for every message id within it. Defaults to 10m.
	RelayDuplicateWindow time.Duration
	// Tracing is OpenTelemetry tracing (OTEL_*; tracing.go). Defaults to
	// off.
	Tracing Tracing
}

// Modes.
const (
	ModeAPI    = "api"
	ModeWorker = "worker"
	ModeAll    = "all"
)

// loadConfig reads the environment, then the flags (which win), fills the
// defaults and validates everything once. Every error names its setting;
// a bad flag is a usageError, and -h or --help is flag.ErrHelp.
func loadConfig(getenv func(string) string, fs *flag.FlagSet, args []string) (Config, []string, error) {
	cfg := Config{
		DatabaseURL:          getenv("DATABASE_URL"),
		ReadModelDatabaseURL: getenv("READMODEL_DATABASE_URL"),
		HTTPAddr:             getenv("HTTP_ADDR"),
		Mode:                 getenv("MODE"),
		LogFormat:            getenv("LOG_FORMAT"),
		LogLevel:             getenv("LOG_LEVEL"),
		AdminAddr:            getenv("ADMIN_ADDR"),
	}
	var errs []error
	duration := func(name string, def time.Duration) time.Duration {
		s := getenv(name)
		if s == "" {
			return def
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q: must be a positive Go duration such as 250ms or 5s", name, s))
			return def
		}
		return d
	}
	cfg.PollInterval = duration("POLL_INTERVAL", 100*time.Millisecond)
	if cfg.PollInterval < time.Millisecond { // every idle subscriber would poll in a loop
		errs = append(errs, fmt.Errorf("POLL_INTERVAL=%s: must be at least 1ms", cfg.PollInterval))
	}
	cfg.ShutdownTimeout = duration("SHUTDOWN_TIMEOUT", 20*time.Second)
	cfg.ConsistencyTimeout = duration("CONSISTENCY_TIMEOUT", 2*time.Second)
	if cfg.ConsistencyTimeout > 30*time.Second {
		errs = append(errs, fmt.Errorf("CONSISTENCY_TIMEOUT=%s: must be at most 30s", cfg.ConsistencyTimeout))
	}
	cfg.IdempotencyKeep = duration("IDEMPOTENCY_KEEP", 24*time.Hour)
	if cfg.IdempotencyKeep < 24*time.Hour {
		errs = append(errs, fmt.Errorf("IDEMPOTENCY_KEEP=%s: must be at least 24h, so that a client's retries within a day are safe", cfg.IdempotencyKeep))
	}
	cfg.TopicRetention = durationOrOff(getenv, "TOPIC_RETENTION", 7*24*time.Hour, 0, "to keep every message", &errs)
	cfg.KeyLastUsedFlush = duration("KEY_LAST_USED_FLUSH", 30*time.Second)
	if cfg.KeyLastUsedFlush > time.Hour {
		errs = append(errs, fmt.Errorf("KEY_LAST_USED_FLUSH=%s: must be at most 1h", cfg.KeyLastUsedFlush))
	}
	cfg.ConsistencyMaxWaits = count(getenv, "CONSISTENCY_MAX_WAITS", 256, 1, &errs)
	cfg.EventFeedWait = duration("EVENT_FEED_WAIT", 20*time.Second)
	if cfg.EventFeedWait > time.Minute {
		errs = append(errs, fmt.Errorf("EVENT_FEED_WAIT=%s: must be at most 60s", cfg.EventFeedWait))
	}
	cfg.EventFeedMaxWaits = count(getenv, "EVENT_FEED_MAX_WAITS", 256, 1, &errs)
	cfg.ExportMaxInFlight = count(getenv, "EXPORT_MAX_IN_FLIGHT", 2, 1, &errs)
	cfg.RequestStatementTimeout = duration("REQUEST_STATEMENT_TIMEOUT", 5*time.Second)
	if cfg.RequestStatementTimeout > time.Hour { // Postgres takes up to 596h; no request should wait an hour
		errs = append(errs, fmt.Errorf("REQUEST_STATEMENT_TIMEOUT=%s: must be at most 1h", cfg.RequestStatementTimeout))
	}
	cfg.HTTPReadTimeout = duration("HTTP_READ_TIMEOUT", 30*time.Second)
	wait, waitName := cfg.ConsistencyTimeout, "CONSISTENCY_TIMEOUT"
	if cfg.EventFeedWait > wait {
		wait, waitName = cfg.EventFeedWait, "EVENT_FEED_WAIT"
	}
	cfg.HTTPWriteTimeout = duration("HTTP_WRITE_TIMEOUT", wait+2*cfg.RequestStatementTimeout+20*time.Second)
	if longest := wait + cfg.RequestStatementTimeout; cfg.HTTPWriteTimeout <= longest {
		errs = append(errs, fmt.Errorf("HTTP_WRITE_TIMEOUT=%s: must exceed %s + REQUEST_STATEMENT_TIMEOUT (%s), the longest legitimate answer", cfg.HTTPWriteTimeout, waitName, longest))
	}
	cfg.HTTPIdleTimeout = duration("HTTP_IDLE_TIMEOUT", 120*time.Second)
	cfg.HTTPMaxConnectionsPerAddress = count(getenv, "HTTP_MAX_CONNECTIONS_PER_ADDRESS", 1024, 0, &errs)
	cfg.KeyRPS = perSecond(getenv, "RATE_LIMIT_KEY_RPS", 50, &errs)
	cfg.KeyBurst = count(getenv, "RATE_LIMIT_KEY_BURST", 100, 1, &errs)
	cfg.MerchantRPS = perSecond(getenv, "RATE_LIMIT_MERCHANT_RPS", 100, &errs)
	cfg.MerchantBurst = count(getenv, "RATE_LIMIT_MERCHANT_BURST", 200, 1, &errs)
	cfg.MerchantInFlight = count(getenv, "RATE_LIMIT_MERCHANT_IN_FLIGHT", 10, 0, &errs)
	cfg.UnknownKeyRPS = perSecond(getenv, "RATE_LIMIT_UNKNOWN_KEY_RPS", 1, &errs)
	cfg.UnknownKeyBurst = count(getenv, "RATE_LIMIT_UNKNOWN_KEY_BURST", 20, 1, &errs)
	cfg.KeyCacheTTL = durationOrOff(getenv, "KEY_CACHE_TTL", 5*time.Second, 5*time.Minute, "for no cache", &errs)
	cfg.TrustedProxies = trustedProxies(getenv("TRUSTED_PROXIES"), &errs)
	cfg.WebhookRetryFor = duration("WEBHOOK_RETRY_FOR", 24*time.Hour)
	cfg.WebhookRetryInitial = duration("WEBHOOK_RETRY_INITIAL", 10*time.Second)
	cfg.WebhookRetryMax = duration("WEBHOOK_RETRY_MAX", time.Hour)
	if cfg.WebhookRetryInitial > cfg.WebhookRetryMax || cfg.WebhookRetryMax > cfg.WebhookRetryFor {
		errs = append(errs, fmt.Errorf("WEBHOOK_RETRY_INITIAL (%s) <= WEBHOOK_RETRY_MAX (%s) <= WEBHOOK_RETRY_FOR (%s) must hold",
			cfg.WebhookRetryInitial, cfg.WebhookRetryMax, cfg.WebhookRetryFor))
	}
	cfg.PlanHorizon = duration("PLAN_HORIZON", 8*7*24*time.Hour)
	if cfg.PlanHorizon < time.Hour || cfg.PlanHorizon > 366*24*time.Hour {
		errs = append(errs, fmt.Errorf("PLAN_HORIZON=%s: must be from 1h to 8784h (a year)", cfg.PlanHorizon))
	}
	cfg.PlanInterval = duration("PLAN_INTERVAL", time.Minute)
	cfg.PlanMerchantShare = count(getenv, "PLAN_MERCHANT_SHARE", 1000, 0, &errs)
	if cfg.PlanInterval < time.Second || cfg.PlanInterval > 24*time.Hour {
		errs = append(errs, fmt.Errorf("PLAN_INTERVAL=%s: must be from 1s to 24h", cfg.PlanInterval))
	}
	// A round creates the orders of the visits starting in [now, now +
	// PLAN_HORIZON) and never one whose start has passed, so the next round
	// must come before the horizon ends; a whole interval to spare covers a
	// round's own length and a leader change.
	if cfg.PlanHorizon < 2*cfg.PlanInterval {
		errs = append(errs, fmt.Errorf("PLAN_HORIZON=%s: must be at least twice PLAN_INTERVAL (%s): a visit that starts between one round's horizon and the next round would never get its order",
			cfg.PlanHorizon, cfg.PlanInterval))
	}
	cfg.WebhookTimeout = duration("WEBHOOK_TIMEOUT", 10*time.Second)
	if cfg.WebhookTimeout > time.Minute {
		errs = append(errs, fmt.Errorf("WEBHOOK_TIMEOUT=%s: must be at most 1m", cfg.WebhookTimeout))
	}
	switch v := getenv("WEBHOOK_ALLOW_PRIVATE"); v {
	case "", "false":
	case "true":
		cfg.WebhookAllowPrivate = true
	default:
		errs = append(errs, fmt.Errorf("WEBHOOK_ALLOW_PRIVATE=%q: must be true or false", v))
	}
	cfg.WebhookDeliveryKeep = duration("WEBHOOK_DELIVERY_KEEP", 168*time.Hour)
	switch v := getenv("PERSONAL_DATA_SEALING"); v {
	case "", "on":
	case "off":
		cfg.SealingOff = true
	default:
		errs = append(errs, fmt.Errorf("PERSONAL_DATA_SEALING=%q: must be on or off (off only to measure the cost of sealing)", v))
	}
	if ring, err := masterKeys(getenv); err != nil {
		errs = append(errs, err)
	} else {
		cfg.MasterKeys = ring
	}
	cfg.RelayNATSURL = getenv("RELAY_NATS_URL")
	cfg.RelayStream = cmp.Or(getenv("RELAY_STREAM"), "HEARTH")
	cfg.RelaySubjectPrefix = cmp.Or(getenv("RELAY_SUBJECT_PREFIX"), "hearth")
	cfg.RelayDuplicateWindow = duration("RELAY_DUPLICATE_WINDOW", 10*time.Minute)
	errs = append(errs, cfg.checkRelay()...)
	cfg.Tracing = loadTracing(getenv, &errs)

	fs.StringVar(&cfg.Mode, "mode", cfg.Mode, "api, worker or all (MODE)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "listen address (HTTP_ADDR)")
	fs.SetOutput(io.Discard)
	fs.VisitAll(func(f *flag.Flag) { f.Value = &setOnce{Value: f.Value, name: f.Name} })
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return Config{}, nil, err
	} else if err != nil {
		return Config{}, nil, usageError{err.Error()}
	}
	// An empty --mode or --http-addr (a script's empty variable) would
	// replace MODE or HTTP_ADDR by the default below (cmp.Or): an instance
	// meant for the API alone would run the workers too, or listen
	// elsewhere. Someone who typed the flag meant a value.
	for flagName, setting := range map[string]string{"mode": "MODE", "http-addr": "HTTP_ADDR"} {
		if f := fs.Lookup(flagName); f != nil && visited(fs, flagName) && strings.TrimSpace(f.Value.String()) == "" {
			return Config{}, nil, usageError{fmt.Sprintf("%s: --%s: must not be empty (leave it out for %s or its default)", fs.Name(), flagName, setting)}
		}
	}

	cfg.ReadModelDatabaseURL = cmp.Or(cfg.ReadModelDatabaseURL, cfg.DatabaseURL)
	cfg.ReadReplicas = readReplicas(getenv, duration, cfg, &errs)
	cfg.HTTPAddr = cmp.Or(cfg.HTTPAddr, ":8080")
	cfg.Mode = cmp.Or(cfg.Mode, ModeAll)
	cfg.LogFormat = cmp.Or(cfg.LogFormat, "text")
	cfg.LogLevel = cmp.Or(cfg.LogLevel, "info")

	switch cfg.Mode {
	case ModeAPI, ModeWorker, ModeAll:
	default:
		errs = append(errs, fmt.Errorf("MODE (--mode) = %q: must be api, worker or all", cfg.Mode))
	}
	if listenAddrProblem(cfg.HTTPAddr) {
		errs = append(errs, fmt.Errorf("HTTP_ADDR (--http-addr) = %q: must be host:port with a port from 0 to 65535, such as :8080", cfg.HTTPAddr))
	}
	if cfg.AdminAddr != "" {
		if listenAddrProblem(cfg.AdminAddr) {
			errs = append(errs, fmt.Errorf("ADMIN_ADDR=%q: must be host:port with a port from 0 to 65535, such as 127.0.0.1:9090", cfg.AdminAddr))
		} else if _, port, _ := net.SplitHostPort(cfg.AdminAddr); cfg.AdminAddr == cfg.HTTPAddr && port != "0" { // port 0: each listener gets a free port
			errs = append(errs, fmt.Errorf("ADMIN_ADDR=%q: must differ from HTTP_ADDR", cfg.AdminAddr))
		}
	}
	// The runtime reads GOGC itself, and takes a value it cannot parse for
	// its default without a word.
	if v := getenv("GOGC"); v != "" && v != "off" {
		if _, err := strconv.Atoi(v); err != nil {
			errs = append(errs, fmt.Errorf("GOGC=%q: must be a whole number (per cent of the live heap) or off", v))
		}
	}
	if cfg.LogFormat != "text" && cfg.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("LOG_FORMAT=%q: must be text or json", cfg.LogFormat))
	}
	if _, err := parseLevel(cfg.LogLevel); err != nil {
		errs = append(errs, err)
	}
	for name, url := range map[string]string{"DATABASE_URL": cfg.DatabaseURL, "READMODEL_DATABASE_URL": cfg.ReadModelDatabaseURL} {
		if url == "" || (name == "READMODEL_DATABASE_URL" && url == cfg.DatabaseURL) {
			continue // required-ness is checked by the commands that need it; a default is not reported twice
		}
		if strings.TrimSpace(url) != url {
			// pgx keeps it: a line break would end in the database name, found
			// only when the server says it has no such database. The URL is
			// not repeated: it may hold a password.
			errs = append(errs, fmt.Errorf("%s: begins or ends with a space or a line break (a secret stored with its newline?); remove it", name))
			continue
		}
		if _, err := pgx.ParseConfig(url); err != nil {
			errs = append(errs, fmt.Errorf("%s: not a valid Postgres URL: %v%s", name, redact(err, url), pgVariablesSet(getenv)))
		}
	}
	return cfg, fs.Args(), errors.Join(errs...)
}

// pgVariables are libpq's environment variables that pgx reads itself
// (pgconn.ParseConfig) for whatever a database URL leaves out.
var pgVariables = []string{"PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGPASSFILE", "PGAPPNAME",
	"PGCONNECT_TIMEOUT", "PGSSLMODE", "PGSSLKEY", "PGSSLCERT", "PGSSLCERTMODE", "PGSSLSNI", "PGSSLROOTCERT",
	"PGSSLPASSWORD", "PGSSLNEGOTIATION", "PGTARGETSESSIONATTRS", "PGSERVICE", "PGSERVICEFILE", "PGTZ", "PGOPTIONS",
	"PGMINPROTOCOLVERSION", "PGMAXPROTOCOLVERSION", "PGCHANNELBINDING", "PGREQUIREAUTH"}

// pgVariablesSet names, for a database URL's error, the PG* variables set
// in the environment: the mistake may be theirs, not the URL's (a bad
// PGSSLMODE fails every URL without sslmode). Never their values: one is
// PGPASSWORD.
func pgVariablesSet(getenv func(string) string) string {
	var set []string
	for _, name := range pgVariables {
		if getenv(name) != "" {
			set = append(set, name)
		}
	}
	if len(set) == 0 {
		return ""
	}
	return " (pgx applies " + strings.Join(set, ", ") + ", set in the environment, to what the URL leaves out)"
}

// perSecond reads a rate in requests per second: a number >= 0, where 0
// turns the limit off.
func perSecond(getenv func(string) string, name string, def float64, errs *[]error) float64 {
	v := getenv(name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		*errs = append(*errs, fmt.Errorf("%s=%q: must be a number of requests per second, 0 or more (0 turns the limit off)", name, v))
		return def
	}
	return f
}

// listenAddrProblem reports whether addr is no address to listen on: not
// host:port, a port out of range (or no service name), a host with space.
func listenAddrProblem(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || strings.ContainsFunc(host, unicode.IsSpace) {
		return true
	}
	_, err = net.LookupPort("tcp", port)
	return err != nil
}

// durationOrOff reads a Go duration of at least 0, which turns the
// setting's work off (off says how, for the message), and at most most
// when most is not 0.
func durationOrOff(getenv func(string) string, name string, def, most time.Duration, off string, errs *[]error) time.Duration {
	v := getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || (most > 0 && d > most) {
		limit := ""
		if most > 0 {
			limit = ", at most " + shortDuration(most)
		}
		*errs = append(*errs, fmt.Errorf("%s=%q: must be a Go duration such as %s (the default)%s, or 0 %s", name, v, shortDuration(def), limit, off))
		return def
	}
	return d
}

// shortDuration writes d as people do: 168h, 5m, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// count reads a whole number of at least least.
func count(getenv func(string) string, name string, def, least int, errs *[]error) int {
	v := getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least || n > math.MaxInt32 {
		*errs = append(*errs, fmt.Errorf("%s=%q: must be a whole number from %d to %d", name, v, least, math.MaxInt32))
		return def
	}
	return n
}

// trustedProxies reads TRUSTED_PROXIES: comma-separated IPs and CIDRs.
func trustedProxies(v string, errs *[]error) []netip.Prefix {
	var out []netip.Prefix
	for item := range strings.SplitSeq(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if p, err := netip.ParsePrefix(item); err == nil {
			if p.Bits() == 0 {
				// Every address a proxy: any client could name its own
				// address in X-Forwarded-For, and so pass the budgets kept
				// per address (unknown keys).
				*errs = append(*errs, fmt.Errorf("TRUSTED_PROXIES: %q trusts every address as a proxy, so any client could choose the address "+
					"Hearth sees; name the proxies' addresses or networks (such as 10.0.0.0/8)", item))
				continue
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(item)
		if err != nil || a.Zone() != "" {
			*errs = append(*errs, fmt.Errorf("TRUSTED_PROXIES: %q is neither an IP address nor a CIDR such as 10.0.0.0/8", item))
			continue
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out
}

// httpLimits is the HTTP port's share of the fair-share settings.
func (c Config) httpLimits() httpport.Limits {
	return httpport.Limits{
		KeyRate: c.KeyRPS, KeyBurst: c.KeyBurst,
		MerchantRate: c.MerchantRPS, MerchantBurst: c.MerchantBurst, MerchantInFlight: c.MerchantInFlight,
		UnknownKeyRate: c.UnknownKeyRPS, UnknownKeyBurst: c.UnknownKeyBurst,
	}
}

// webhookSchedule is the retry schedule of webhook deliveries.
func (c Config) webhookSchedule() webhook.Schedule {
	return webhook.Schedule{Initial: c.WebhookRetryInitial, Max: c.WebhookRetryMax, For: c.WebhookRetryFor}
}

// requireDatabase checks that DATABASE_URL is set.
// masterKeys reads MASTER_KEY or the file MASTER_KEY_FILE names; nil when
// neither is set. Errors name the setting (and the file), never a key.
func masterKeys(getenv func(string) string) (*keyring.Ring, error) {
	inline, file := getenv("MASTER_KEY"), getenv("MASTER_KEY_FILE")
	switch {
	case inline != "" && file != "":
		return nil, errors.New("MASTER_KEY and MASTER_KEY_FILE are both set: set one")
	case file != "":
		text, err := os.ReadFile(file)
		var pathErr *fs.PathError
		switch {
		case err != nil && strings.Contains(file, ":") && errors.As(err, &pathErr):
			// Not repeated, nor is the file name in os.ReadFile's error: a
			// name with ':' is more likely an ID:KEY line set here for
			// MASTER_KEY than a file's.
			return nil, fmt.Errorf("MASTER_KEY_FILE: %v: it names a file of ID:KEY lines (a line itself goes in MASTER_KEY)", pathErr.Err)
		case err != nil:
			return nil, fmt.Errorf("MASTER_KEY_FILE=%s: %w", file, err)
		}
		ring, err := keyring.Parse(string(text))
		if err != nil {
			return nil, fmt.Errorf("MASTER_KEY_FILE=%s: %w", file, err)
		}
		return ring, nil
	case inline != "":
		ring, err := keyring.Parse(inline)
		if err != nil {
			return nil, fmt.Errorf("MASTER_KEY: %w", err)
		}
		return ring, nil
	}
	return nil, nil
}

// requireMasterKeys is serve's check: Hearth does not start without the
// keys that seal its secrets.
func (c Config) requireMasterKeys() error {
	if c.MasterKeys == nil {
		return errors.New("MASTER_KEY (or MASTER_KEY_FILE) is not set: Hearth seals webhook signing secrets with it; " +
			"make one with `app keyring new`, keep it in your secret store, and set MASTER_KEY to the line it prints")
	}
	return nil
}

func (c Config) requireDatabase() error {
	if c.DatabaseURL == "" {
		return errors.New("DATABASE_URL is not set: point it at Postgres 14 or newer, e.g. postgres://user:pass@localhost:5432/hearth (or use `make run`, which starts a throwaway cluster)")
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("LOG_LEVEL=%q: must be debug, info, warn or error", s)
	}
	return l, nil
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	level, _ := parseLevel(cfg.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// redact keeps a password out of an error message: the whole password,
// and each part of it between '@' (pgx, which parses a password holding a
// raw '@' only up to it, masks only that part).
func redact(err error, url string) string {
	msg := err.Error()
	if i := strings.Index(url, "://"); i >= 0 {
		if at := strings.LastIndex(url, "@"); at > i {
			if colon := strings.Index(url[i+3:at], ":"); colon >= 0 {
				password := url[i+3+colon+1 : at]
				msg = strings.ReplaceAll(msg, password, "xxxxx")
				for part := range strings.SplitSeq(password, "@") {
					if part != "" {
						msg = strings.ReplaceAll(msg, part, "xxxxx")
					}
				}
			}
		}
	}
	return msg
}

// redactedURL is raw with its password, query and fragment, if any, each
// replaced by "xxxxx": a token may be written in any of them (an OTLP
// endpoint's, which the exporter does not send: it posts to the URL's
// scheme, host and path alone). So is a user without a password, the
// token of a DSN (https://TOKEN@host/1), which url.URL.Redacted leaves.
func redactedURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(not a URL)"
	}
	if _, hasPassword := u.User.Password(); u.User != nil && !hasPassword {
		u.User = url.User("xxxxx")
	}
	if u.RawQuery != "" {
		u.RawQuery = "xxxxx"
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = "xxxxx", ""
	}
	return u.Redacted()
}

// setOnce refuses a flag's second value: the flag package keeps the last
// one without a word, so `verify --projection orders --projection plans`
// would verify plans only, and pass.
type setOnce struct {
	flag.Value
	name string
	set  bool
}

func (o *setOnce) Set(v string) error {
	if o.set {
		return fmt.Errorf("--%s given twice; give it once", o.name)
	}
	o.set = true
	return o.Value.Set(v)
}

// IsBoolFlag keeps a boolean flag (--json, --all) one that takes no value.
func (o *setOnce) IsBoolFlag() bool {
	b, ok := o.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// visited reports whether the command line set the flag name.
func visited(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
