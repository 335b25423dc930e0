package main

import (
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"hearth/app/publicevent"
	"hearth/internal/natstest"
	"hearth/internal/pgtest"
)

// With RELAY_NATS_URL, `app serve` relays what a request wrote to its
// JetStream stream (created with the configured name, subjects and
// duplicate window), shows the relay in /metrics, and stops cleanly.
func TestServeRelaysEvents(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t).EventStore
	srv := natstest.Start(t)
	vars := map[string]string{
		"DATABASE_URL": url, "LOG_FORMAT": "json", "POLL_INTERVAL": "20ms", "SHUTDOWN_TIMEOUT": "5s",
		"RELAY_NATS_URL": srv.URL(), "RELAY_STREAM": "CRM", "RELAY_SUBJECT_PREFIX": "acme.crm", "RELAY_DUPLICATE_WINDOW": "3m",
	}
	key := createKeyCLI(t, vars, "--merchant", "acme", "--role", "operator")
	started := startServe(t, vars)
	a := &api{t: t, base: "http://" + started.HTTPAddr, client: &http.Client{}}
	id := a.createOrder(key, a.createCustomer(key, "Ada"), 1200)

	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := nc.JetStream()
	require.NoError(t, err)
	// Wait on the stream's state, and read the message only once it is
	// there: Debian's nats-server 2.9 can crash (a nil dereference in
	// jsMsgGetRequest) on a message read that meets the stream being
	// created, and the relay creates it as it starts.
	require.Eventually(t, func() bool {
		info, err := js.StreamInfo("CRM")
		return err == nil && info.State.Msgs > 0
	}, 30*time.Second, 10*time.Millisecond, "the order's creation reaches the stream")
	msg, err := js.GetLastMsg("CRM", "acme.crm.*.order.created")
	require.NoError(t, err)
	var pe publicevent.Event
	require.NoError(t, json.Unmarshal(msg.Data, &pe))
	require.Equal(t, id, pe.AggregateID)
	require.Equal(t, "acme.crm."+pe.MerchantID+".order.created", msg.Subject)
	info, err := js.StreamInfo("CRM")
	require.NoError(t, err)
	require.Equal(t, 3*time.Minute, info.Config.Duplicates)

	require.Eventually(t, func() bool {
		m := a.metrics()
		return strings.Contains(m, "\nhearth_leader_is_leader{unit=\"hearth/relay\"} 1\n") &&
			strings.Contains(m, "\nhearth_relay_lag_events{topic=\"orders\"} 0\n") &&
			strings.Contains(m, "\nhearth_relay_published_total{topic=\"orders\"} 1\n")
	}, 10*time.Second, 10*time.Millisecond, "the relay leads, has published the order and has no lag: %s", a.metrics())
	started.shutdown()
}

// operations.md, Relay, "Publishing everything again (a new stream)": stop
// every worker, DELETE FROM relay_offsets, start them with the new
// RELAY_STREAM. JetStream gives a subject to one stream only, so while the
// old stream still takes the relay's subjects the new one cannot be
// created and the relay retries for ever: its log must name the stream
// that holds them, and once that stream is deleted, the new one gets every
// event again, without a restart.
func TestRelayPublishesEverythingAgainIntoANewStream(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t).EventStore
	srv := natstest.Start(t)
	vars := map[string]string{
		"DATABASE_URL": url, "LOG_FORMAT": "json", "POLL_INTERVAL": "20ms", "SHUTDOWN_TIMEOUT": "5s",
		"RELAY_NATS_URL": srv.URL(), "RELAY_STREAM": "HEARTH",
	}
	key := createKeyCLI(t, vars, "--merchant", "acme", "--role", "operator")
	first := startServe(t, vars)
	a := &api{t: t, base: "http://" + first.HTTPAddr, client: &http.Client{}}
	a.createOrder(key, a.createCustomer(key, "Ada"), 1200)
	a.createOrder(key, a.createCustomer(key, "Grace"), 900)

	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := nc.JetStream()
	require.NoError(t, err)
	db := pgtest.Open(t, url)
	var events uint64
	require.NoError(t, db.DB.QueryRow(`SELECT count(*) FROM events`).Scan(&events))
	require.Eventually(t, func() bool {
		info, err := js.StreamInfo("HEARTH")
		return err == nil && info.State.Msgs == events
	}, 30*time.Second, 10*time.Millisecond, "every event reaches the first stream")
	first.shutdown()

	_, err = db.DB.Exec(`DELETE FROM relay_offsets`)
	require.NoError(t, err)
	vars["RELAY_STREAM"] = "HEARTH2"
	second := startServe(t, vars)
	require.Eventually(t, func() bool {
		return strings.Contains(second.stderr.String(), `create stream HEARTH2: its subjects are taken by stream HEARTH:`)
	}, 30*time.Second, 10*time.Millisecond, "the relay names the stream that holds its subjects: %s", second.stderr)

	require.NoError(t, js.DeleteStream("HEARTH")) // nats stream rm HEARTH
	require.Eventually(t, func() bool {
		info, err := js.StreamInfo("HEARTH2")
		return err == nil && info.State.Msgs == events
	}, 30*time.Second, 10*time.Millisecond, "every event is published again, into the new stream")
	second.shutdown()
}

// Workers deployed from different manifests may disagree on RELAY_STREAM or
// RELAY_SUBJECT_PREFIX, and leadership moves the relay between them with
// its one recorded position: the events relayed after a move would go to
// another stream (or under other subjects), and the consumers of the first
// would silently never see them. A worker whose target is not the one the
// position was recorded for must refuse to relay, saying why, and the
// relay must go on from a worker whose target is.
func TestWorkersThatDisagreeOnTheRelayTargetDoNotSplitTheStream(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t).EventStore
	srv := natstest.Start(t)
	vars := map[string]string{
		"DATABASE_URL": url, "LOG_FORMAT": "json", "POLL_INTERVAL": "20ms", "SHUTDOWN_TIMEOUT": "5s",
		"RELAY_NATS_URL": srv.URL(), "RELAY_STREAM": "HEARTH", "RELAY_SUBJECT_PREFIX": "hearth",
	}
	key := createKeyCLI(t, vars, "--merchant", "acme", "--role", "operator")
	first := startServe(t, vars)
	a := &api{t: t, base: "http://" + first.HTTPAddr, client: &http.Client{}}
	a.createOrder(key, a.createCustomer(key, "Ada"), 1200)

	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := nc.JetStream()
	require.NoError(t, err)
	db := pgtest.Open(t, url)
	events := func() uint64 {
		var n uint64
		require.NoError(t, db.DB.QueryRow(`SELECT count(*) FROM events`).Scan(&n))
		return n
	}
	inStream := func(name string) uint64 {
		info, err := js.StreamInfo(name)
		if err != nil {
			return 0
		}
		return info.State.Msgs
	}
	require.Eventually(t, func() bool { return inStream("HEARTH") == events() },
		30*time.Second, 10*time.Millisecond, "every event reaches HEARTH")

	// Another worker's manifest names another stream and prefix; the first
	// worker goes away, so the relay can only move to it.
	other := maps.Clone(vars)
	other["RELAY_STREAM"], other["RELAY_SUBJECT_PREFIX"] = "OTHER", "other"
	second := startServe(t, other)
	first.shutdown()
	b := &api{t: t, base: "http://" + second.HTTPAddr, client: &http.Client{}}
	b.createOrder(key, b.createCustomer(key, "Grace"), 900)
	const refusal = `but the relay's position (relay_offsets) was recorded for stream HEARTH`
	require.Eventually(t, func() bool {
		return strings.Contains(second.stderr.String(), refusal) || inStream("OTHER") > 0
	}, 30*time.Second, 10*time.Millisecond, "the second worker neither relays nor refuses: %s", second.stderr)
	require.Zero(t, inStream("OTHER"),
		"the second worker relayed the events written since the move into stream OTHER, which HEARTH's consumers never see")
	require.Contains(t, second.stderr.String(), refusal)

	// A worker with the recorded target takes the relay over (the refusing
	// one rests) and relays what was written meanwhile into HEARTH.
	third := startServe(t, vars)
	require.Eventually(t, func() bool { return inStream("HEARTH") == events() },
		30*time.Second, 10*time.Millisecond, "the events written while the relay was refused reach HEARTH: %s", third.stderr)
	_, err = js.StreamInfo("OTHER")
	require.ErrorIs(t, err, nats.ErrStreamNotFound, "the refusing worker created no stream of its own")
	third.shutdown()
	second.shutdown()
}
