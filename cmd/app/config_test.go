package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/harness"
	"hearth/internal/keyring"
)

// env is a fake getenv over a map.
// testMasterKey is the master key of the tests that run serve (MASTER_KEY):
// a fixed key, which seals nothing that outlives a test.
const testMasterKey = "test:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

// syncBuffer is a bytes.Buffer safe for concurrent use: run installs its
// stderr as the default slog logger, which any goroutine may write to.
type syncBuffer = harness.SyncBuffer

const testDatabaseURL = "postgres://hearth:s3cret@db.example:5432/hearth"

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	defaults := Config{
		DatabaseURL: testDatabaseURL, ReadModelDatabaseURL: testDatabaseURL,
		HTTPAddr: ":8080", Mode: ModeAll, LogFormat: "text", LogLevel: "info",
		PollInterval: 100 * time.Millisecond, ShutdownTimeout: 20 * time.Second, ConsistencyTimeout: 2 * time.Second,
		IdempotencyKeep:     24 * time.Hour,
		TopicRetention:      7 * 24 * time.Hour,
		KeyLastUsedFlush:    30 * time.Second,
		ConsistencyMaxWaits: 256, RequestStatementTimeout: 5 * time.Second,
		EventFeedWait: 20 * time.Second, EventFeedMaxWaits: 256, ExportMaxInFlight: 2,
		HTTPReadTimeout: 30 * time.Second, HTTPWriteTimeout: 50 * time.Second, HTTPIdleTimeout: 120 * time.Second,
		HTTPMaxConnectionsPerAddress: 1024,
		KeyRPS:                       50, KeyBurst: 100, MerchantRPS: 100, MerchantBurst: 200, MerchantInFlight: 10,
		UnknownKeyRPS: 1, UnknownKeyBurst: 20, KeyCacheTTL: 5 * time.Second,
		WebhookRetryFor: 24 * time.Hour, WebhookRetryInitial: 10 * time.Second, WebhookRetryMax: time.Hour,
		WebhookTimeout: 10 * time.Second, WebhookDeliveryKeep: 168 * time.Hour,
		PlanHorizon: 8 * 7 * 24 * time.Hour, PlanInterval: time.Minute, PlanMerchantShare: 1000,
		RelayStream: "HEARTH", RelaySubjectPrefix: "hearth", RelayDuplicateWindow: 10 * time.Minute,
		ReadReplicas: ReadReplicas{MaxLag: 5 * time.Second, CheckEvery: time.Second},
	}
	with := func(change func(*Config)) Config {
		c := defaults
		change(&c)
		return c
	}
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want Config
		rest []string
	}{
		{
			name: "defaults",
			env:  map[string]string{"DATABASE_URL": testDatabaseURL},
			want: defaults,
		},
		{
			name: "every setting from the environment",
			env: map[string]string{
				"DATABASE_URL": testDatabaseURL, "READMODEL_DATABASE_URL": "postgres://rm@db.example/reads",
				"HTTP_ADDR": "127.0.0.1:9000", "MODE": "api", "LOG_FORMAT": "json", "LOG_LEVEL": "debug",
				"POLL_INTERVAL": "250ms", "SHUTDOWN_TIMEOUT": "5s", "CONSISTENCY_TIMEOUT": "5s",
				"IDEMPOTENCY_KEEP":      "72h",
				"TOPIC_RETENTION":       "36h",
				"KEY_LAST_USED_FLUSH":   "1m",
				"CONSISTENCY_MAX_WAITS": "10", "REQUEST_STATEMENT_TIMEOUT": "1s", "HTTP_READ_TIMEOUT": "10s",
				"EVENT_FEED_WAIT": "4s", "EVENT_FEED_MAX_WAITS": "16", "EXPORT_MAX_IN_FLIGHT": "6",
				"HTTP_WRITE_TIMEOUT": "7s", "HTTP_IDLE_TIMEOUT": "1m", "ADMIN_ADDR": "127.0.0.1:9090", "HTTP_MAX_CONNECTIONS_PER_ADDRESS": "64",
				"RATE_LIMIT_KEY_RPS": "2.5", "RATE_LIMIT_KEY_BURST": "5", "RATE_LIMIT_MERCHANT_RPS": "7",
				"RATE_LIMIT_MERCHANT_BURST": "9", "RATE_LIMIT_MERCHANT_IN_FLIGHT": "4", "RATE_LIMIT_UNKNOWN_KEY_RPS": "0.2",
				"RATE_LIMIT_UNKNOWN_KEY_BURST": "3", "KEY_CACHE_TTL": "1m", "TRUSTED_PROXIES": " 10.0.0.0/8, 192.0.2.7,2001:db8::/32 ,::ffff:198.51.100.1",
				"WEBHOOK_RETRY_FOR": "48h", "WEBHOOK_RETRY_INITIAL": "1s", "WEBHOOK_RETRY_MAX": "10m", "WEBHOOK_TIMEOUT": "3s",
				"WEBHOOK_ALLOW_PRIVATE": "true", "WEBHOOK_DELIVERY_KEEP": "24h", "PLAN_HORIZON": "336h", "PLAN_INTERVAL": "10s", "PLAN_MERCHANT_SHARE": "50",
				"RELAY_NATS_URL": "nats://n1.example:4222, tls://u:p@n2.example:4222", "RELAY_STREAM": "CRM",
				"RELAY_SUBJECT_PREFIX": "acme.crm", "RELAY_DUPLICATE_WINDOW": "1h",
				"READ_REPLICA_URLS": "postgres://r1.example/hearth, postgres://r2.example:5433/hearth", "READMODEL_REPLICA_URLS": "postgres://rm-r1.example/reads",
				"READ_REPLICA_MAX_LAG": "30s", "READ_REPLICA_CHECK_INTERVAL": "250ms",
			},
			want: Config{
				DatabaseURL: testDatabaseURL, ReadModelDatabaseURL: "postgres://rm@db.example/reads",
				HTTPAddr: "127.0.0.1:9000", Mode: ModeAPI, LogFormat: "json", LogLevel: "debug",
				PollInterval: 250 * time.Millisecond, ShutdownTimeout: 5 * time.Second, ConsistencyTimeout: 5 * time.Second,
				IdempotencyKeep:     72 * time.Hour,
				TopicRetention:      36 * time.Hour,
				KeyLastUsedFlush:    time.Minute,
				ConsistencyMaxWaits: 10, RequestStatementTimeout: time.Second, HTTPReadTimeout: 10 * time.Second,
				EventFeedWait: 4 * time.Second, EventFeedMaxWaits: 16, ExportMaxInFlight: 6,
				HTTPWriteTimeout: 7 * time.Second, HTTPIdleTimeout: time.Minute, AdminAddr: "127.0.0.1:9090", HTTPMaxConnectionsPerAddress: 64,
				KeyRPS: 2.5, KeyBurst: 5, MerchantRPS: 7, MerchantBurst: 9, MerchantInFlight: 4,
				UnknownKeyRPS: 0.2, UnknownKeyBurst: 3, KeyCacheTTL: time.Minute,
				TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"),
					netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("198.51.100.1/32")},
				WebhookRetryFor: 48 * time.Hour, WebhookRetryInitial: time.Second, WebhookRetryMax: 10 * time.Minute,
				WebhookTimeout: 3 * time.Second, WebhookAllowPrivate: true, WebhookDeliveryKeep: 24 * time.Hour,
				PlanHorizon: 14 * 24 * time.Hour, PlanInterval: 10 * time.Second, PlanMerchantShare: 50,
				RelayNATSURL: "nats://n1.example:4222, tls://u:p@n2.example:4222", RelayStream: "CRM",
				RelaySubjectPrefix: "acme.crm", RelayDuplicateWindow: time.Hour,
				ReadReplicas: ReadReplicas{URLs: []string{"postgres://r1.example/hearth", "postgres://r2.example:5433/hearth"},
					ReadModelURLs: []string{"postgres://rm-r1.example/reads"}, MaxLag: 30 * time.Second, CheckEvery: 250 * time.Millisecond},
			},
		},
		{
			name: "the write timeout follows the consistency and statement timeouts",
			env:  map[string]string{"DATABASE_URL": testDatabaseURL, "CONSISTENCY_TIMEOUT": "30s", "REQUEST_STATEMENT_TIMEOUT": "10s"},
			want: with(func(c *Config) {
				c.ConsistencyTimeout, c.RequestStatementTimeout, c.HTTPWriteTimeout = 30*time.Second, 10*time.Second, 70*time.Second
			}),
		},
		{
			name: "the write timeout follows the event feed's wait when it is the longer",
			env:  map[string]string{"DATABASE_URL": testDatabaseURL, "EVENT_FEED_WAIT": "45s"},
			want: with(func(c *Config) { c.EventFeedWait, c.HTTPWriteTimeout = 45*time.Second, 75*time.Second }),
		},
		{
			name: "0 turns the limits and the key cache off",
			env: map[string]string{"DATABASE_URL": testDatabaseURL, "RATE_LIMIT_KEY_RPS": "0", "RATE_LIMIT_MERCHANT_RPS": "0",
				"RATE_LIMIT_MERCHANT_IN_FLIGHT": "0", "RATE_LIMIT_UNKNOWN_KEY_RPS": "0", "KEY_CACHE_TTL": "0s"},
			want: with(func(c *Config) {
				c.KeyRPS, c.MerchantRPS, c.MerchantInFlight, c.UnknownKeyRPS, c.KeyCacheTTL = 0, 0, 0, 0, 0
			}),
		},
		{
			name: "PERSONAL_DATA_SEALING=off",
			env:  map[string]string{"DATABASE_URL": testDatabaseURL, "PERSONAL_DATA_SEALING": "off"},
			want: with(func(c *Config) { c.SealingOff = true }),
		},
		{
			name: "PERSONAL_DATA_SEALING=on",
			env:  map[string]string{"DATABASE_URL": testDatabaseURL, "PERSONAL_DATA_SEALING": "on"},
			want: defaults,
		},
		{
			name: "TOPIC_RETENTION=0 keeps every message",
			env:  map[string]string{"DATABASE_URL": testDatabaseURL, "TOPIC_RETENTION": "0"},
			want: with(func(c *Config) { c.TopicRetention = 0 }),
		},
		{
			name: "flags override the environment",
			env:  map[string]string{"DATABASE_URL": testDatabaseURL, "MODE": "api", "HTTP_ADDR": ":9000"},
			args: []string{"--mode", "worker", "--http-addr=:9100"},
			want: with(func(c *Config) { c.Mode, c.HTTPAddr = ModeWorker, ":9100" }),
		},
		{
			name: "a flag replaces a bad environment value",
			env:  map[string]string{"DATABASE_URL": testDatabaseURL, "MODE": "x"},
			args: []string{"-mode", "api"},
			want: with(func(c *Config) { c.Mode = ModeAPI }),
		},
		{
			name: "without DATABASE_URL (the commands that need it check)",
			env:  map[string]string{},
			want: with(func(c *Config) { c.DatabaseURL, c.ReadModelDatabaseURL = "", "" }),
		},
		{
			name: "arguments after the flags are returned",
			env:  map[string]string{"DATABASE_URL": testDatabaseURL},
			args: []string{"--mode", "api", "extra", "--mode", "worker"},
			want: with(func(c *Config) { c.Mode = ModeAPI }),
			rest: []string{"extra", "--mode", "worker"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, rest, err := loadConfig(env(tc.env), flag.NewFlagSet("serve", flag.ContinueOnError), tc.args)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, len(tc.rest), len(rest), "rest: %q", rest)
			if len(tc.rest) > 0 {
				require.Equal(t, tc.rest, rest)
			}
		})
	}
}

func TestLoadConfigErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		env      map[string]string
		args     []string
		settings []string // named in the error
		secret   string   // never in the error
	}{
		{name: "MODE", env: map[string]string{"MODE": "x"}, settings: []string{"MODE"}},
		{name: "--mode", args: []string{"--mode", "both"}, settings: []string{"--mode"}},
		{name: "HTTP_ADDR", env: map[string]string{"HTTP_ADDR": "nonsense"}, settings: []string{"HTTP_ADDR"}},
		{name: "--http-addr", args: []string{"--http-addr", "nonsense"}, settings: []string{"--http-addr"}},
		{name: "LOG_FORMAT", env: map[string]string{"LOG_FORMAT": "xml"}, settings: []string{"LOG_FORMAT"}},
		{name: "LOG_LEVEL", env: map[string]string{"LOG_LEVEL": "loud"}, settings: []string{"LOG_LEVEL"}},
		{name: "negative POLL_INTERVAL", env: map[string]string{"POLL_INTERVAL": "-1s"}, settings: []string{"POLL_INTERVAL"}},
		{name: "zero POLL_INTERVAL", env: map[string]string{"POLL_INTERVAL": "0s"}, settings: []string{"POLL_INTERVAL"}},
		{name: "POLL_INTERVAL without a unit", env: map[string]string{"POLL_INTERVAL": "100"}, settings: []string{"POLL_INTERVAL"}},
		{name: "SHUTDOWN_TIMEOUT", env: map[string]string{"SHUTDOWN_TIMEOUT": "soon"}, settings: []string{"SHUTDOWN_TIMEOUT"}},
		{name: "IDEMPOTENCY_KEEP under a day", env: map[string]string{"IDEMPOTENCY_KEEP": "23h"}, settings: []string{"IDEMPOTENCY_KEEP"}},
		{name: "negative KEY_LAST_USED_FLUSH", env: map[string]string{"KEY_LAST_USED_FLUSH": "-30s"}, settings: []string{"KEY_LAST_USED_FLUSH"}},
		{name: "KEY_LAST_USED_FLUSH over 1h", env: map[string]string{"KEY_LAST_USED_FLUSH": "2h"}, settings: []string{"KEY_LAST_USED_FLUSH"}},
		{name: "CONSISTENCY_MAX_WAITS", env: map[string]string{"CONSISTENCY_MAX_WAITS": "0"}, settings: []string{"CONSISTENCY_MAX_WAITS"}},
		{name: "REQUEST_STATEMENT_TIMEOUT", env: map[string]string{"REQUEST_STATEMENT_TIMEOUT": "0"}, settings: []string{"REQUEST_STATEMENT_TIMEOUT"}},
		{name: "HTTP_READ_TIMEOUT", env: map[string]string{"HTTP_READ_TIMEOUT": "x"}, settings: []string{"HTTP_READ_TIMEOUT"}},
		{name: "HTTP_IDLE_TIMEOUT", env: map[string]string{"HTTP_IDLE_TIMEOUT": "-1s"}, settings: []string{"HTTP_IDLE_TIMEOUT"}},
		{
			name:     "HTTP_WRITE_TIMEOUT shorter than a read-your-writes answer",
			env:      map[string]string{"CONSISTENCY_TIMEOUT": "10s", "EVENT_FEED_WAIT": "1s", "HTTP_WRITE_TIMEOUT": "12s"},
			settings: []string{"HTTP_WRITE_TIMEOUT", "CONSISTENCY_TIMEOUT", "REQUEST_STATEMENT_TIMEOUT"},
		},
		{
			name:     "HTTP_WRITE_TIMEOUT shorter than an event feed long poll",
			env:      map[string]string{"EVENT_FEED_WAIT": "30s", "HTTP_WRITE_TIMEOUT": "32s"},
			settings: []string{"HTTP_WRITE_TIMEOUT", "EVENT_FEED_WAIT", "REQUEST_STATEMENT_TIMEOUT"},
		},
		{name: "EVENT_FEED_WAIT over 60s", env: map[string]string{"EVENT_FEED_WAIT": "61s"}, settings: []string{"EVENT_FEED_WAIT"}},
		{name: "zero EVENT_FEED_WAIT", env: map[string]string{"EVENT_FEED_WAIT": "0s"}, settings: []string{"EVENT_FEED_WAIT"}},
		{name: "zero EVENT_FEED_MAX_WAITS", env: map[string]string{"EVENT_FEED_MAX_WAITS": "0"}, settings: []string{"EVENT_FEED_MAX_WAITS"}},
		{name: "negative HTTP_MAX_CONNECTIONS_PER_ADDRESS", env: map[string]string{"HTTP_MAX_CONNECTIONS_PER_ADDRESS": "-1"}, settings: []string{"HTTP_MAX_CONNECTIONS_PER_ADDRESS"}},
		{name: "zero EXPORT_MAX_IN_FLIGHT", env: map[string]string{"EXPORT_MAX_IN_FLIGHT": "0"}, settings: []string{"EXPORT_MAX_IN_FLIGHT"}},
		{name: "ADMIN_ADDR", env: map[string]string{"ADMIN_ADDR": "nonsense"}, settings: []string{"ADMIN_ADDR"}},
		{name: "ADMIN_ADDR equal to HTTP_ADDR", env: map[string]string{"ADMIN_ADDR": ":8080"}, settings: []string{"ADMIN_ADDR", "HTTP_ADDR"}},
		{name: "negative RATE_LIMIT_KEY_RPS", env: map[string]string{"RATE_LIMIT_KEY_RPS": "-1"}, settings: []string{"RATE_LIMIT_KEY_RPS"}},
		{name: "RATE_LIMIT_KEY_RPS not a number", env: map[string]string{"RATE_LIMIT_KEY_RPS": "fast"}, settings: []string{"RATE_LIMIT_KEY_RPS"}},
		{name: "infinite RATE_LIMIT_MERCHANT_RPS", env: map[string]string{"RATE_LIMIT_MERCHANT_RPS": "+Inf"}, settings: []string{"RATE_LIMIT_MERCHANT_RPS"}},
		{name: "NaN RATE_LIMIT_UNKNOWN_KEY_RPS", env: map[string]string{"RATE_LIMIT_UNKNOWN_KEY_RPS": "NaN"}, settings: []string{"RATE_LIMIT_UNKNOWN_KEY_RPS"}},
		{name: "zero RATE_LIMIT_KEY_BURST", env: map[string]string{"RATE_LIMIT_KEY_BURST": "0"}, settings: []string{"RATE_LIMIT_KEY_BURST"}},
		{name: "fractional RATE_LIMIT_MERCHANT_BURST", env: map[string]string{"RATE_LIMIT_MERCHANT_BURST": "2.5"}, settings: []string{"RATE_LIMIT_MERCHANT_BURST"}},
		{name: "huge RATE_LIMIT_UNKNOWN_KEY_BURST", env: map[string]string{"RATE_LIMIT_UNKNOWN_KEY_BURST": "99999999999"}, settings: []string{"RATE_LIMIT_UNKNOWN_KEY_BURST"}},
		{name: "negative RATE_LIMIT_MERCHANT_IN_FLIGHT", env: map[string]string{"RATE_LIMIT_MERCHANT_IN_FLIGHT": "-1"}, settings: []string{"RATE_LIMIT_MERCHANT_IN_FLIGHT"}},
		{name: "negative TOPIC_RETENTION", env: map[string]string{"TOPIC_RETENTION": "-1h"}, settings: []string{"TOPIC_RETENTION"}},
		{name: "TOPIC_RETENTION in days", env: map[string]string{"TOPIC_RETENTION": "7d"}, settings: []string{"TOPIC_RETENTION"}},
		{name: "negative KEY_CACHE_TTL", env: map[string]string{"KEY_CACHE_TTL": "-5s"}, settings: []string{"KEY_CACHE_TTL"}},
		{name: "KEY_CACHE_TTL too long", env: map[string]string{"KEY_CACHE_TTL": "1h"}, settings: []string{"KEY_CACHE_TTL"}},
		{name: "KEY_CACHE_TTL without a unit", env: map[string]string{"KEY_CACHE_TTL": "5"}, settings: []string{"KEY_CACHE_TTL"}},
		{name: "TRUSTED_PROXIES with a host name", env: map[string]string{"TRUSTED_PROXIES": "10.0.0.1, proxy.internal"}, settings: []string{"TRUSTED_PROXIES", "proxy.internal"}},
		{name: "TRUSTED_PROXIES with a bad CIDR", env: map[string]string{"TRUSTED_PROXIES": "10.0.0.0/33"}, settings: []string{"TRUSTED_PROXIES", "10.0.0.0/33"}},
		{name: "RELAY_NATS_URL without a scheme", env: map[string]string{"RELAY_NATS_URL": "u:hunter2@localhost:4222"}, settings: []string{"RELAY_NATS_URL"}, secret: "hunter2"},
		{name: "RELAY_NATS_URL with a bad item", env: map[string]string{"RELAY_NATS_URL": "nats://a:4222,http://b"}, settings: []string{"RELAY_NATS_URL"}},
		// A port no server can have: the relay would retry for ever.
		{name: "RELAY_NATS_URL with a port out of range", env: map[string]string{"RELAY_NATS_URL": "nats://u:hunter2@n1.example:99999"},
			settings: []string{"RELAY_NATS_URL", "port"}, secret: "hunter2"},
		// Trusting every address as a proxy lets any client name its own
		// address in X-Forwarded-For, and so pass the budgets per address.
		{name: "TRUSTED_PROXIES trusting every IPv4 address", env: map[string]string{"TRUSTED_PROXIES": "10.0.0.1, 0.0.0.0/0"}, settings: []string{"TRUSTED_PROXIES", "0.0.0.0/0", "every"}},
		{name: "TRUSTED_PROXIES trusting every IPv6 address", env: map[string]string{"TRUSTED_PROXIES": "::/0"}, settings: []string{"TRUSTED_PROXIES", "::/0", "every"}},
		{name: "RELAY_STREAM with a dot", env: map[string]string{"RELAY_STREAM": "hearth.events"}, settings: []string{"RELAY_STREAM"}},
		{name: "RELAY_SUBJECT_PREFIX with a wildcard", env: map[string]string{"RELAY_SUBJECT_PREFIX": "hearth.*"}, settings: []string{"RELAY_SUBJECT_PREFIX"}},
		{name: "RELAY_SUBJECT_PREFIX with an empty token", env: map[string]string{"RELAY_SUBJECT_PREFIX": "hearth."}, settings: []string{"RELAY_SUBJECT_PREFIX"}},
		{name: "PERSONAL_DATA_SEALING", env: map[string]string{"PERSONAL_DATA_SEALING": "false"}, settings: []string{"PERSONAL_DATA_SEALING", "on or off"}},
		{name: "zero RELAY_DUPLICATE_WINDOW", env: map[string]string{"RELAY_DUPLICATE_WINDOW": "0s"}, settings: []string{"RELAY_DUPLICATE_WINDOW"}},
		{
			name:     "DATABASE_URL with a bad port",
			env:      map[string]string{"DATABASE_URL": "postgres://bob:hunter2@localhost:notaport/db"},
			settings: []string{"DATABASE_URL"}, secret: "hunter2",
		},
		{
			name:     "DATABASE_URL that is not a URL",
			env:      map[string]string{"DATABASE_URL": "not-a-url://bob:hunter2@local host/db"},
			settings: []string{"DATABASE_URL"}, secret: "hunter2",
		},
		{
			name:     "DATABASE_URL with a bad escape in the password",
			env:      map[string]string{"DATABASE_URL": "postgres://bob:hunter2%zz@localhost/db"},
			settings: []string{"DATABASE_URL"}, secret: "hunter2",
		},
		{
			name:     "DATABASE_URL whose password holds a raw @",
			env:      map[string]string{"DATABASE_URL": "postgres://bob:hun@ter2@localhost:notaport/db"},
			settings: []string{"DATABASE_URL"}, secret: "ter2",
		},
		{
			name: "OTEL_EXPORTER_OTLP_HEADERS written Name: value",
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://otlp.example.com",
				"OTEL_EXPORTER_OTLP_HEADERS": "Authorization: Bearer tok_SUPERSECRET"},
			settings: []string{"OTEL_EXPORTER_OTLP_HEADERS"}, secret: "SUPERSECRET",
		},
		{
			name: "OTEL_EXPORTER_OTLP_TRACES_HEADERS without =",
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://otlp.example.com",
				"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-team=a,api-key:SUPERSECRET"},
			settings: []string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS"}, secret: "SUPERSECRET",
		},
		{
			name:     "OTEL_EXPORTER_OTLP_ENDPOINT with a password and another scheme",
			env:      map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "grpc://user:otlpPASSWORD@otlp.example.com:4317"},
			settings: []string{"OTEL_EXPORTER_OTLP_ENDPOINT"}, secret: "otlpPASSWORD",
		},
		{
			name:     "MASTER_KEY written KEY:ID",
			env:      map[string]string{"MASTER_KEY": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=:main"},
			settings: []string{"MASTER_KEY"}, secret: "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
		},
		{
			name:     "MASTER_KEY with a key in its ID",
			env:      map[string]string{"MASTER_KEY": "k/AAECAwQFBgcICQ:main"},
			settings: []string{"MASTER_KEY"}, secret: "AAECAwQFBgcICQ",
		},
		{
			name:     "MASTER_KEY_FILE set to a key line, MASTER_KEY's value",
			env:      map[string]string{"MASTER_KEY_FILE": testMasterKey},
			settings: []string{"MASTER_KEY_FILE", "MASTER_KEY"}, secret: testMasterKey[5:],
		},
		{
			name:     "DATABASE_URL in keyword/value form",
			env:      map[string]string{"DATABASE_URL": "host=localhost password=hunter2 port=abc"},
			settings: []string{"DATABASE_URL"}, secret: "hunter2",
		},
		{
			name: "READMODEL_DATABASE_URL",
			env: map[string]string{"DATABASE_URL": testDatabaseURL,
				"READMODEL_DATABASE_URL": "postgres://reader:topsecret@localhost:99999999/reads"},
			settings: []string{"READMODEL_DATABASE_URL"}, secret: "topsecret",
		},
		{
			name:     "READ_REPLICA_URLS not a URL",
			env:      map[string]string{"READ_REPLICA_URLS": "postgres://r1.internal/hearth,host=r2 password=hunter2"},
			settings: []string{"READ_REPLICA_URLS", "replica 2"}, secret: "hunter2",
		},
		{
			name:     "READ_REPLICA_URLS with a multi-host URL",
			env:      map[string]string{"READ_REPLICA_URLS": "postgres://r1.internal:5432,r2.internal:5432/hearth"},
			settings: []string{"READ_REPLICA_URLS", "one server"},
		},
		{
			name:     "READMODEL_REPLICA_URLS with a bad port",
			env:      map[string]string{"READMODEL_REPLICA_URLS": "postgres://bob:hunter2@r1.internal:notaport/reads"},
			settings: []string{"READMODEL_REPLICA_URLS"}, secret: "hunter2",
		},
		{
			name:     "READ_REPLICA_URLS asking for a primary",
			env:      map[string]string{"READ_REPLICA_URLS": "postgres://r1.internal/hearth?target_session_attrs=read-write"},
			settings: []string{"READ_REPLICA_URLS", "replica 1", "target_session_attrs"},
		},
		{name: "zero READ_REPLICA_MAX_LAG", env: map[string]string{"READ_REPLICA_MAX_LAG": "0s"}, settings: []string{"READ_REPLICA_MAX_LAG"}},
		{name: "READ_REPLICA_CHECK_INTERVAL without a unit", env: map[string]string{"READ_REPLICA_CHECK_INTERVAL": "1"}, settings: []string{"READ_REPLICA_CHECK_INTERVAL"}},
		{
			name:     "every bad setting at once",
			env:      map[string]string{"MODE": "x", "LOG_FORMAT": "xml", "LOG_LEVEL": "loud", "POLL_INTERVAL": "-1s"},
			settings: []string{"MODE", "LOG_FORMAT", "LOG_LEVEL", "POLL_INTERVAL"},
		},
		{name: "unknown flag", args: []string{"--verbose"}, settings: []string{"verbose"}},
		{name: "flag without its value", args: []string{"--mode"}, settings: []string{"mode"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := loadConfig(env(tc.env), flag.NewFlagSet("serve", flag.ContinueOnError), tc.args)
			require.Error(t, err)
			for _, setting := range tc.settings {
				require.Contains(t, err.Error(), setting)
			}
			if tc.secret != "" {
				require.NotContains(t, err.Error(), tc.secret, "the password stays out of the message")
			}
		})
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		args     []string
		env      map[string]string
		usage    bool   // a usageError (exit status 2)
		contains string // in the error
	}{
		{name: "serve without DATABASE_URL", args: []string{"serve"}, contains: "DATABASE_URL"},
		{name: "no command without DATABASE_URL", args: nil, contains: "DATABASE_URL"},
		{name: "only flags without DATABASE_URL", args: []string{"--mode", "worker"}, contains: "DATABASE_URL"},
		{name: "migrate without DATABASE_URL", args: []string{"migrate"}, contains: "DATABASE_URL"},
		{name: "keys create without DATABASE_URL", args: []string{"keys", "create", "--merchant", "acme", "--role", "operator"},
			contains: "DATABASE_URL"},
		{name: "bad setting", args: []string{"serve"}, env: map[string]string{"DATABASE_URL": testDatabaseURL, "MODE": "x"},
			contains: "MODE"},
		{name: "unknown command", args: []string{"frobnicate"}, usage: true, contains: `"frobnicate"`},
		{name: "keys without a subcommand", args: []string{"keys"}, usage: true, contains: "create, list, revoke, rotate"},
		{name: "keys with an unknown subcommand", args: []string{"keys", "delete"}, usage: true, contains: "create, list, revoke, rotate"},
		{name: "keys list without DATABASE_URL", args: []string{"keys", "list"}, contains: "DATABASE_URL"},
		{name: "audit without a subcommand", args: []string{"audit"}, usage: true, contains: "audit: the subcommands are list"},
		{name: "keys revoke with a flag of create", args: []string{"keys", "revoke", "x", "--role", "admin"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "role"},
		{name: "unexpected arguments", args: []string{"serve", "now"}, env: map[string]string{"DATABASE_URL": testDatabaseURL},
			usage: true, contains: "now"},
		{name: "verify with a negative recheck", args: []string{"verify", "--recheck", "-5s"}, env: map[string]string{"DATABASE_URL": testDatabaseURL},
			usage: true, contains: "--recheck must not be negative"},
		{name: "keys create with a bad role", args: []string{"keys", "create", "--merchant", "acme", "--role", "bogus"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "bogus"},
		{name: "keys create without a merchant", args: []string{"keys", "create", "--role", "operator"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "--merchant"},
		{name: "customers without a subcommand", args: []string{"customers"}, usage: true, contains: "customers: the subcommands are export"},
		{name: "customers export without DATABASE_URL", args: []string{"customers", "export", "--merchant", "acme", "x"},
			contains: "DATABASE_URL"},
		{name: "customers export without a merchant", args: []string{"customers", "export", "x"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "--merchant NAME CUSTOMER_ID"},
		{name: "customers export with a flag of keys", args: []string{"customers", "export", "x", "--role", "admin"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "role"},
		// --mode and --http-addr are serve's (and dev's): another command
		// would ignore them without a word.
		{name: "keys list with serve's --mode", args: []string{"keys", "list", "--mode", "worker"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "--mode"},
		{name: "verify with serve's --http-addr", args: []string{"verify", "--http-addr", ":9000"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "--http-addr"},
		{name: "customers erase with serve's --mode", args: []string{"customers", "erase", "--merchant", "acme", "x", "--confirm", "x", "--mode", "api"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "--mode"},
		// A flag given twice would keep its last value without a word:
		// `verify --projection orders --projection plans` would verify
		// plans only and pass.
		{name: "verify with --projection twice", args: []string{"verify", "--projection", "orders", "--projection", "plans"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "--projection given twice"},
		{name: "keys create with --merchant twice", args: []string{"keys", "create", "--role", "operator", "--merchant", "acme", "--merchant=globex"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "--merchant given twice"},
		{name: "serve with --mode twice", args: []string{"--mode", "api", "--mode", "worker"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "--mode given twice"},
		// An erasure's and an export's command line, checked before the
		// databases are opened (and migrated): usage errors naming what is
		// wrong, not failures after a connection.
		{name: "customers erase without --confirm", args: []string{"customers", "erase", "--merchant", "acme", "0b9f8a2e-6b1c-4c1e-9b7a-3f1e2d4c5b6a"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "--confirm: must repeat the id"},
		{name: "staff erase confirming another id", args: []string{"staff", "erase", "--merchant", "acme", "0b9f8a2e-6b1c-4c1e-9b7a-3f1e2d4c5b6a",
			"--confirm", "1c0a9b3f-7c2d-4d2f-8c8b-4a2f3e5d6c7b"}, env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "--confirm: must repeat the id"},
		{name: "customers erase with an ID that is not a UUID", args: []string{"customers", "erase", "--merchant", "acme", "ada", "--confirm", "ada"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "ID: must be a UUID"},
		{name: "customers export with an ID that is not a UUID", args: []string{"customers", "export", "--merchant", "acme", "ada"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "ID: must be a UUID"},
		// The erasures' commands take no argument, and --json lists only.
		{name: "erasures run with an argument", args: []string{"erasures", "run", "0b9f8a2e-6b1c-4c1e-9b7a-3f1e2d4c5b6a"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "unexpected arguments"},
		{name: "erasures run with --json", args: []string{"erasures", "run", "--json"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "json"},
		{name: "erasures without a subcommand", args: []string{"erasures"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "the subcommands are list, run"},
		// Refused before anything is opened (verify would migrate the
		// databases first), naming the flag, as rebuild does.
		{name: "verify with an unknown projection", args: []string{"verify", "--projection", "ordres"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: `--projection: unknown projection "ordres"`},
		// Refused before the databases are opened (and migrated), as verify
		// refuses its --projection.
		{name: "parked list with an unknown projection", args: []string{"parked", "list", "--projection", "ordres"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: `--projection: unknown projection "ordres"`},
		{name: "parked replay --all with an unknown projection", args: []string{"parked", "replay", "--all", "--projection", "ordres"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: `--projection: unknown projection "ordres"`},
		// A grace the store cannot keep (it keeps microseconds) and an
		// empty --by (leaving it out means cli:$USER) are mistakes, not
		// their defaults.
		{name: "keys rotate with a grace below a microsecond", args: []string{"keys", "rotate", "0b9f8a2e-6b1c-4c1e-9b7a-3f1e2d4c5b6a", "--grace", "500ns"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "--grace"},
		{name: "keys rotate with an empty --by", args: []string{"keys", "rotate", "0b9f8a2e-6b1c-4c1e-9b7a-3f1e2d4c5b6a", "--by", ""},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "--by"},
		// app dev without DATABASE_URL starts a throwaway Postgres for both
		// databases: a read model named alone would be replaced silently.
		{name: "dev with a read model but no event store", args: []string{"dev"},
			env: map[string]string{"READMODEL_DATABASE_URL": testDatabaseURL}, contains: "READMODEL_DATABASE_URL"},
		{name: "keys revoke with an empty --by=", args: []string{"keys", "revoke", "--by=", "0b9f8a2e-6b1c-4c1e-9b7a-3f1e2d4c5b6a"},
			env: map[string]string{"DATABASE_URL": testDatabaseURL}, usage: true, contains: "--by"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr syncBuffer
			err := run(t.Context(), tc.args, env(tc.env), &stdout, &stderr)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.contains)
			require.Equal(t, tc.usage, errors.As(err, new(usageError)), "usage error: %v", err)
			if tc.usage {
				require.Contains(t, err.Error(), "usage:", "a usage error shows the usage")
			}
			require.Empty(t, stdout.String(), "stdout carries only what scripts capture")
		})
	}

	t.Run("help", func(t *testing.T) {
		t.Parallel()
		var stdout syncBuffer
		require.NoError(t, run(t.Context(), []string{"help"}, env(nil), &stdout, io.Discard))
		require.True(t, strings.HasPrefix(stdout.String(), "usage:"), "%q", stdout.String())
	})
}

// -h and --help as the first argument ask for the usage: on stdout, exit
// status 0, not a configuration error from the flag set's flag.ErrHelp.
func TestRunHelpFlags(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"-h", "--help"} {
		var stdout syncBuffer
		require.NoError(t, run(t.Context(), []string{arg}, env(nil), &stdout, io.Discard), arg)
		require.True(t, strings.HasPrefix(stdout.String(), "usage:"), "%s: %q", arg, stdout.String())
	}
}

// An unknown flag is a bad command line: a usageError, exit status 2, not
// a configuration error (status 1).
func TestRunUnknownFlagIsUsageError(t *testing.T) {
	t.Parallel()
	err := run(t.Context(), []string{"serve", "--verbose"}, env(nil), io.Discard, io.Discard)
	require.ErrorAs(t, err, new(usageError))
}

// Settings' messages write durations as people do.
func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		168 * time.Hour: "168h", 5 * time.Minute: "5m", 10 * time.Minute: "10m", 90 * time.Minute: "1h30m",
		5 * time.Second: "5s", 1500 * time.Millisecond: "1.5s",
	} {
		require.Equal(t, want, shortDuration(d))
	}
}

// The master keys: MASTER_KEY or a file, parsed once at start-up; every
// error names the setting and never shows a key; serve refuses to start
// without them.
func TestMasterKeySettings(t *testing.T) {
	t.Parallel()
	load := func(vars map[string]string) (Config, error) {
		cfg, _, err := loadConfig(env(vars), flag.NewFlagSet("serve", flag.ContinueOnError), nil)
		return cfg, err
	}
	cfg, err := load(map[string]string{"MASTER_KEY": testMasterKey})
	require.NoError(t, err)
	require.Equal(t, "test", cfg.MasterKeys.ActiveID())

	older, err := keyring.New("older")
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "master.key")
	require.NoError(t, os.WriteFile(file, []byte("# rotated 2026-12\n"+testMasterKey+"\n"+older+"\n"), 0o600))
	cfg, err = load(map[string]string{"MASTER_KEY_FILE": file})
	require.NoError(t, err)
	require.Equal(t, []string{"test", "older"}, cfg.MasterKeys.IDs(), "the first line seals")

	cfg, err = load(nil)
	require.NoError(t, err)
	require.Nil(t, cfg.MasterKeys)

	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"MASTER_KEY": "test:c2hvcnQ="}, "MASTER_KEY: key 1: KEY must be 32 bytes, not 5"},
		{map[string]string{"MASTER_KEY": testMasterKey + ",nocolon"}, "MASTER_KEY: key 2: must be ID:KEY"},
		{map[string]string{"MASTER_KEY_FILE": missing}, "MASTER_KEY_FILE=" + missing + ": open"},
		{map[string]string{"MASTER_KEY": testMasterKey, "MASTER_KEY_FILE": file}, "MASTER_KEY and MASTER_KEY_FILE are both set"},
	} {
		_, err := load(tc.vars)
		require.ErrorContains(t, err, tc.want)
		require.NotContains(t, err.Error(), testMasterKey[5:], "no key material in the message")
	}

	err = run(t.Context(), []string{"serve"}, env(map[string]string{"DATABASE_URL": "postgres://nowhere/x"}), io.Discard, io.Discard)
	require.ErrorContains(t, err, "MASTER_KEY (or MASTER_KEY_FILE) is not set", "serve does not start without master keys")
}

// `app keyring new` prints a line MASTER_KEY takes.
func TestKeyringNew(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"keyring", "new", "2027-01"}, env(nil), &out, io.Discard))
	ring, err := keyring.Parse(out.String())
	require.NoError(t, err)
	require.Equal(t, "2027-01", ring.ActiveID())

	out.Reset()
	require.NoError(t, run(t.Context(), []string{"keyring", "new"}, env(nil), &out, io.Discard))
	require.Regexp(t, `^k\d{8}:[A-Za-z0-9+/]{43}=\n$`, out.String(), "an id from the date when none is given")

	err = run(t.Context(), []string{"keyring", "new", "bad id"}, env(nil), io.Discard, io.Discard)
	require.ErrorAs(t, err, new(usageError))
}

// The visit generator's settings: a bad one names itself.
func TestPlanSettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"PLAN_HORIZON": "30m"}, "PLAN_HORIZON=30m0s: must be from 1h to 8784h"},
		{map[string]string{"PLAN_HORIZON": "10000h"}, "PLAN_HORIZON=10000h0m0s: must be from 1h to 8784h"},
		{map[string]string{"PLAN_INTERVAL": "500ms"}, "PLAN_INTERVAL=500ms: must be from 1s to 24h"},
	} {
		vars := map[string]string{"DATABASE_URL": testDatabaseURL}
		maps.Copy(vars, tc.vars)
		_, _, err := loadConfig(env(vars), flag.NewFlagSet("serve", flag.ContinueOnError), nil)
		require.ErrorContains(t, err, tc.want)
	}
}

// The start-up line that says tracing is on names the endpoint without a
// password or a token its URL may carry.
func TestRedactedURL(t *testing.T) {
	t.Parallel()
	require.Equal(t, "https://user:xxxxx@otlp.example.com:4318/v1/traces", redactedURL("https://user:otlpPASSWORD@otlp.example.com:4318/v1/traces"))
	require.Equal(t, "http://localhost:4318/v1/traces", redactedURL("http://localhost:4318/v1/traces"))
	require.Equal(t, "https://otlp.example.com/v1/traces?xxxxx#xxxxx", redactedURL("https://otlp.example.com/v1/traces?api-key=otlpTOKEN#otlpTOKEN"))
	require.Equal(t, "(not a URL)", redactedURL("http://a b:PASSWORD@%zz"))
	// A user without a password is a token in a DSN (https://TOKEN@host/1).
	require.Equal(t, "https://xxxxx@otlp.example.com/v1/traces", redactedURL("https://otlpTOKEN@otlp.example.com/v1/traces"))
}

// The visit generator creates the orders of the visits that start in
// [now, now + PLAN_HORIZON) at each round, every PLAN_INTERVAL, and never a
// visit whose start has passed (command.GenerateVisits): with rounds as far
// apart as the horizon is long, a visit starting between one round's
// horizon and the next round never gets its order, without a word. Such a
// pair of settings stops start-up, naming both.
func TestPlanHorizonMustOutlastTheRounds(t *testing.T) {
	t.Parallel()
	load := func(horizon, interval string) error {
		_, _, err := loadConfig(env(map[string]string{"DATABASE_URL": testDatabaseURL, "PLAN_HORIZON": horizon, "PLAN_INTERVAL": interval}),
			flag.NewFlagSet("serve", flag.ContinueOnError), nil)
		return err
	}
	for _, tc := range []struct{ horizon, interval string }{
		{"1h", "2h"},   // every other hour's visits lost
		{"1h", "1h"},   // a round that takes a moment misses the visits at the horizon's end
		{"20h", "12h"}, // a round late by a leader change or its own length misses some
	} {
		err := load(tc.horizon, tc.interval)
		require.Error(t, err, "PLAN_HORIZON=%s with PLAN_INTERVAL=%s: visits between two rounds would never get their orders", tc.horizon, tc.interval)
		require.ErrorContains(t, err, "PLAN_HORIZON")
		require.ErrorContains(t, err, "PLAN_INTERVAL")
	}
	require.NoError(t, load("2h", "1h"), "a horizon of two rounds leaves a whole round to spare")
	require.NoError(t, load("1344h", "24h"))
}

// -h and --help after a command ask for the usage as they do before it
// (TestRunHelpFlags): on stdout, exit status 0, not a usage error that
// reports "configuration: flag: help requested" with exit status 2.
func TestRunHelpFlagsAfterACommand(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "-h"}, {"keys", "create", "-h"}, {"verify", "--help"}, {"keys", "revoke", "--help"},
		{"parked", "replay", "orders", "-h"}, // after a positional argument
	} {
		var stdout syncBuffer
		err := run(t.Context(), args, env(nil), &stdout, io.Discard)
		require.NoError(t, err, "%q", args)
		require.True(t, strings.HasPrefix(stdout.String(), "usage:"), "%q: %q", args, stdout.String())
	}
}

// -h and --help right after a command that takes a subcommand (`app keys
// --help`, what an operator types to recall the subcommands) ask for the
// usage too (README: "before or after a command"), not a usage error that
// exits 2 naming the subcommands on stderr.
func TestRunHelpFlagsBeforeASubcommand(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"keys", "--help"}, {"parked", "-h"}, {"customers", "--help"}, {"staff", "-h"}, {"erasures", "--help"},
		{"keyring", "-h"}, {"audit", "--help"}, {"projections", "-help"},
	} {
		var stdout syncBuffer
		err := run(t.Context(), args, env(nil), &stdout, io.Discard)
		require.NoError(t, err, "%q", args)
		require.True(t, strings.HasPrefix(stdout.String(), "usage:"), "%q: %q", args, stdout.String())
	}
}

// A bad flag is the command line's mistake, not a setting's: its message
// does not begin "configuration:".
func TestRunUnknownFlagIsNoConfigurationError(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"serve", "--verbose"}, {"keys", "revoke", "0b9f8a2e-6b1c-4c1e-9b7a-3f1e2d4c5b6a", "--verbose"}} {
		err := run(t.Context(), args, env(map[string]string{"DATABASE_URL": testDatabaseURL}), io.Discard, io.Discard)
		require.ErrorAs(t, err, new(usageError))
		require.ErrorContains(t, err, "-verbose")
		require.False(t, strings.HasPrefix(err.Error(), "configuration:"), "%q: %q", args, strings.SplitN(err.Error(), "\n", 2)[0])
	}
}

// `keys list --merchant "$M"` with M empty (a script's variable unset)
// would list every merchant's keys, their names and ids, where one
// merchant's were asked for: an empty --merchant is refused, as `parked`
// refuses an empty --projection, before any database is opened.
func TestKeysListRefusesAnEmptyMerchant(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"keys", "list", "--merchant", ""}, {"keys", "list", "--json", "--merchant= "}} {
		var stdout syncBuffer
		err := run(t.Context(), args, env(map[string]string{"DATABASE_URL": testDatabaseURL}), &stdout, io.Discard)
		require.ErrorAs(t, err, new(usageError), "%q: an empty --merchant lists every merchant's keys", args)
		require.ErrorContains(t, err, "--merchant")
		require.Empty(t, stdout.String())
	}
}

// pgx reads libpq's PG* variables for what a database URL leaves out, so a
// bad PGSSLMODE fails the parse of a DATABASE_URL that holds no sslmode,
// and the message, naming DATABASE_URL alone, sends the operator to a URL
// with nothing wrong in it. It names the PG* variables that are set (never
// their values: PGPASSWORD is one). Not parallel: pgx reads the process's
// environment itself.
func TestDatabaseURLErrorsNameThePGVariablesThatApply(t *testing.T) {
	for _, tc := range []struct {
		urls, pg map[string]string
		names    []string
	}{
		{map[string]string{"DATABASE_URL": testDatabaseURL}, map[string]string{"PGSSLMODE": "bogus", "PGPASSWORD": "pgpassSECRET"},
			[]string{"DATABASE_URL", "PGSSLMODE", "PGPASSWORD"}},
		{map[string]string{"DATABASE_URL": "host=db.example dbname=hearth", "READMODEL_DATABASE_URL": "postgres://rm.example/hearth"},
			map[string]string{"PGCONNECT_TIMEOUT": "soon"}, []string{"DATABASE_URL", "READMODEL_DATABASE_URL", "PGCONNECT_TIMEOUT"}},
		{map[string]string{"DATABASE_URL": "postgres://db.example/hearth?target_session_attrs=any", "READ_REPLICA_URLS": "postgres://replica.example/hearth"},
			map[string]string{"PGTARGETSESSIONATTRS": "bogus"}, []string{"READ_REPLICA_URLS", "PGTARGETSESSIONATTRS"}},
	} {
		t.Run(strings.Join(slices.Sorted(maps.Keys(tc.pg)), ","), func(t *testing.T) {
			vars := maps.Clone(tc.urls)
			for name, v := range tc.pg {
				t.Setenv(name, v)
				vars[name] = v
			}
			_, _, err := loadConfig(env(vars), flag.NewFlagSet("serve", flag.ContinueOnError), nil)
			require.Error(t, err)
			for _, name := range tc.names {
				require.ErrorContains(t, err, name)
			}
			require.NotContains(t, err.Error(), "pgpassSECRET")
		})
	}
}

// A database URL written to a secret with its line break (echo URL >
// file, a secret made from that file) parses: the line break ends up in the
// database name, and Hearth connects, to be told that database "hearth
// " does not exist. Space or a line break around a URL is refused at
// start-up, naming the setting, never repeating the URL.
func TestDatabaseURLWithALineBreakIsRefused(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"DATABASE_URL", "READMODEL_DATABASE_URL"} {
		for _, url := range []string{testDatabaseURL + "\n", testDatabaseURL + "?sslmode=disable\r\n", " " + testDatabaseURL} {
			vars := map[string]string{"DATABASE_URL": testDatabaseURL, name: url}
			_, _, err := loadConfig(env(vars), flag.NewFlagSet("serve", flag.ContinueOnError), nil)
			require.Error(t, err, "%s=%q", name, url)
			require.ErrorContains(t, err, name)
			require.NotContains(t, err.Error(), "s3cret")
		}
	}
}

// An empty --mode or --http-addr (a script's variable that was empty) is a
// usage error, as an empty --by is: read as left out, it replaced MODE or
// HTTP_ADDR from the environment by the default, so `MODE=api app serve
// --mode "$M"` ran the workers too, and on :8080.
func TestRunRefusesAnEmptyServeFlag(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"serve", "--mode", ""}, {"serve", "--http-addr", ""}, {"serve", "--mode", " "}} {
		err := run(t.Context(), args, env(map[string]string{"MODE": "api", "HTTP_ADDR": "127.0.0.1:0"}), io.Discard, io.Discard)
		require.ErrorAs(t, err, new(usageError), "%q: an empty flag read as left out: %v", args, err)
		require.ErrorContains(t, err, "must not be empty", "%q", args)
	}
}

// --confirm is erase's: given to export (`app customers export ...
// --confirm ID`, an erase line edited into an export) it is a flag of
// another subcommand, a usage error as operations.md says, not ignored.
func TestExportRefusesEraseConfirm(t *testing.T) {
	t.Parallel()
	id := "00000000-0000-4000-8000-000000000001"
	for _, cmd := range []string{"customers", "staff"} {
		err := run(t.Context(), []string{cmd, "export", "--merchant", "acme", id, "--confirm", id}, env(nil), io.Discard, io.Discard)
		require.ErrorAs(t, err, new(usageError), "%s export --confirm: %v", cmd, err)
		require.ErrorContains(t, err, "confirm")
	}
}
