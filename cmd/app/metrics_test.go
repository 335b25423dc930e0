package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// scrapeTimeout is Prometheus' default scrape_timeout: a scrape that takes
// longer is lost whole (up == 0).
const scrapeTimeout = 10 * time.Second

// scrapeLocked scrapes /metrics once, as Prometheus would (within
// scrapeTimeout), while a transaction holds tables of the event store
// locked (as a migration or a VACUUM FULL would hold them), so that the
// collectors' queries on them run into their timeouts: metrics read from
// the database that cannot be read. It returns the status and the body.
func (a *api) scrapeLocked(tables ...string) (int, string) {
	t := a.t
	t.Helper()
	ctx := t.Context()
	tx, err := a.dbs.es.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(ctx, `LOCK TABLE `+strings.Join(tables, ", ")+` IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	scraper := &http.Client{Transport: a.client.Transport, Timeout: scrapeTimeout}
	res, err := scraper.Get(a.base + "/metrics")
	require.NoError(t, err, "the scrape")
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(raw)
}

// A metric read from the database that cannot be read (a locked table, a
// database out of reach) leaves that metric out of the scrape, not the
// whole of /metrics: the HTTP counters (the 503s of an outage), the
// leadership and the topics are what an operator reads during such an
// outage, and the failed read is counted.
//
// Not parallel: the lock holds the orders subscriber's transaction back.
func TestMetricsServeTheRestWhenADatabaseReadFails(t *testing.T) {
	a := setup(t, pgtest.NewDB(t))
	a.must(http.StatusOK, http.MethodGet, "/healthz", "", nil)

	status, body := a.scrapeLocked("watermill_offsets_orders")
	require.Equal(t, http.StatusOK, status, "/metrics answered:\n%s", body)
	require.Contains(t, body, `hearth_http_requests_total{code="200",method="GET",route="GET /healthz"} 1`)
	require.Contains(t, body, `hearth_topic_messages{topic="orders"}`)
	require.NotContains(t, body, `hearth_projection_lag_events{projection="orders"}`, "a lag that could not be read is left out, not reported")
	// promhttp counts the failure after that scrape's gathering: the next
	// shows it.
	require.Regexp(t, `\npromhttp_metric_handler_errors_total\{cause="gathering"\} [1-9]`, a.metrics(), "the failed read is counted")
}

// A table a round of /metrics reads that cannot be read (locked, as a
// migration or a VACUUM FULL of it holds it: docs/operations.md,
// Retention) leaves out what it measures alone: every other read has its
// own time, not what the blocked read left of a shared one. The offsets
// table of one topic: that topic's projections' lag; the other topics'
// lag and the parked aggregates stay. The topic table: that topic's sizes;
// the other topics' stay.
//
// Not parallel: the lock holds the orders subscriber's transaction back.
func TestMetricsOneLockedTableLeavesTheOthers(t *testing.T) {
	for _, tc := range []struct {
		table, absent string
		want          []string
	}{
		{"watermill_offsets_orders", `hearth_projection_lag_events{projection="orders"}`, []string{
			`hearth_projection_lag_events{projection="schedules"} 0`,
			`hearth_projection_lag_seconds{projection="service_requests"} 0`,
			`hearth_projection_lag_events{projection="webhooks_plans"} 0`,
			`hearth_projection_parked_aggregates{projection="orders"} 0`,
		}},
		{"watermill_orders", `hearth_topic_messages{topic="orders"}`, []string{
			`hearth_topic_messages{topic="plans"} 0`,
			`hearth_topic_oldest_message_age_seconds{topic="poison"} 0`,
			`hearth_projection_lag_events{projection="schedules"} 0`,
		}},
	} {
		t.Run(tc.table, func(t *testing.T) {
			a := setup(t, pgtest.NewDB(t))
			status, body := a.scrapeLocked(tc.table)
			require.Equal(t, http.StatusOK, status, "/metrics answered:\n%s", body)
			require.NotContains(t, body, tc.absent)
			for _, want := range tc.want {
				require.Contains(t, body, want)
			}
		})
	}
}

// Every quantile alert of the runbook can tell the quantile from its
// threshold: the histogram it reads, as /metrics serves it, has a bucket
// at the threshold. Without one, histogram_quantile interpolates across
// the buckets around it, and the alert fires for a p99 below it (or stays
// quiet above it).
func TestRunbookQuantileAlertsHaveTheirBucket(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	alerts := regexp.MustCompile(`histogram_quantile\([0-9.]+, rate\((hearth_[a-z_]+)_bucket(?:\{[^}]*\})?\[[^\]]+\]\)\) > ([0-9.]+)`).
		FindAllStringSubmatch(string(doc), -1)
	require.NotEmpty(t, alerts, "the runbook's quantile alerts")
	a := setup(t, pgtest.NewDB(t))
	body := a.metrics()
	for _, m := range alerts {
		name, threshold := m[1], m[2]
		require.Contains(t, body, name+"_bucket", "the alert's histogram is served")
		bucket := regexp.MustCompile(`\n` + name + `_bucket\{(?:[^}]*,)?le="` + regexp.QuoteMeta(threshold) + `"\}`)
		require.Regexp(t, bucket, body, "%s has no bucket at the alert's threshold %s: %s", name, threshold, m[0])
	}
}

// The runbook's retention alert (the oldest message of a topic past
// TOPIC_RETENTION + 1h: a consumer group holds it back) selects no topic
// that retention never prunes: the poison topic keeps every poisoned
// event for good, and has no group for hearth_topic_retention_held_by to
// name, so one event poisoned more than TOPIC_RETENTION + 1h ago would
// keep the alert firing with nothing for an operator to release.
func TestRunbookRetentionAlertLeavesOutThePoisonTopic(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	alert := regexp.MustCompile("`hearth_topic_oldest_message_age_seconds(\\{[^}]*\\})? > TOPIC_RETENTION \\+ 1h`").FindStringSubmatch(string(doc))
	require.NotNil(t, alert, "the runbook's retention alert")

	a := setup(t, pgtest.NewDB(t))
	_, err = a.dbs.es.DB.ExecContext(t.Context(), `INSERT INTO watermill_poison (uuid, payload, metadata, transaction_id, created_at)
		VALUES (gen_random_uuid()::text, '{}', '{}', pg_current_xact_id(), now()::timestamp - interval '30 days')`)
	require.NoError(t, err)
	var series string
	require.Eventually(t, func() bool {
		for line := range strings.Lines(a.metrics()) {
			if strings.HasPrefix(line, `hearth_topic_oldest_message_age_seconds{topic="poison"} `) && metric(line, `hearth_topic_oldest_message_age_seconds{topic="poison"}`) > 29*24*3600 {
				series = line
				return true
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond, "the poison topic's age is served")

	// The alert's selector, applied to the series' labels: only = and !=
	// on topic are expected in it.
	selected := true
	for _, m := range regexp.MustCompile(`topic(!?=~?)"([^"]*)"`).FindAllStringSubmatch(alert[1], -1) {
		switch op, v := m[1], m[2]; op {
		case "=":
			selected = selected && v == "poison"
		case "!=":
			selected = selected && v != "poison"
		case "=~":
			selected = selected && regexp.MustCompile("^(?:"+v+")$").MatchString("poison")
		case "!~":
			selected = selected && !regexp.MustCompile("^(?:"+v+")$").MatchString("poison")
		}
	}
	require.False(t, selected, "the alert %s fires for good on %s", alert[0], series)
}

// The pending erasures that cannot be read are counted as a failed read
// too, like every other metric read from the database: their absence alone
// would silence the overdue alert without a trace in the metrics.
//
// Not parallel: the lock holds the erasure worker back.
func TestMetricsCountAFailedErasureRead(t *testing.T) {
	a := setup(t, pgtest.NewDB(t))
	status, body := a.scrapeLocked("erasure_second_passes")
	require.Equal(t, http.StatusOK, status, "/metrics answered:\n%s", body)
	require.NotContains(t, body, "hearth_erasure_second_passes_pending")
	require.Regexp(t, `\npromhttp_metric_handler_errors_total\{cause="gathering"\} [1-9]`, a.metrics(), "the failed read is counted")
}

// However many of the database reads wait (every topic's offsets table
// locked: each projection's lag query waits its whole timeout), a scrape
// answers within Prometheus' default scrape timeout, with what could be
// read: a round of the collectors is bounded as a whole too, or a database
// that stops answering (a network partition) would lose the whole scrape.
//
// Not parallel: the locks hold the subscribers' transactions back.
func TestMetricsAnswerWithinTheScrapeTimeout(t *testing.T) {
	a := setup(t, pgtest.NewDB(t))
	a.must(http.StatusOK, http.MethodGet, "/healthz", "", nil)
	start := time.Now()
	status, body := a.scrapeLocked("watermill_offsets_orders", "watermill_offsets_plans",
		"watermill_offsets_schedules", "watermill_offsets_service_requests")
	require.Equal(t, http.StatusOK, status, "/metrics answered:\n%s", body)
	require.Less(t, time.Since(start), scrapeTimeout)
	require.Contains(t, body, `hearth_http_requests_total`)
	require.Contains(t, body, `hearth_topic_messages{topic="orders"}`)
}

// The request duration histogram tells the event feed's long polls apart:
// it has a bucket at the default wait and one at the longest a setting
// allows (EVENT_FEED_WAIT at most 60 s), so a poll that waited its whole
// wait is not lumped with every request over 10 s in +Inf.
func TestRequestDurationsCoverTheLongestWait(t *testing.T) {
	t.Parallel()
	tel, err := newTelemetry(databases{es: pgtest.Open(t, pgtest.NewDB(t).EventStore)}, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	tel.observeRequest(http.MethodGet, "GET /v1/events", http.StatusOK, 20*time.Second)
	rec := httptest.NewRecorder()
	tel.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, le := range []string{"20", "60"} {
		require.Contains(t, rec.Body.String(), `hearth_http_request_duration_seconds_bucket{method="GET",route="GET /v1/events",le="`+le+`"} 1`)
	}
}
