package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/vault"
	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/uuid"
	"hearth/internal/keyring"
	"hearth/internal/pgtest"
)

// The event feed (GET /v1/events) end to end: real HTTP, real Postgres,
// the wiring serve uses.

type feedEvent struct {
	ID               string         `json:"id"`
	Type             string         `json:"type"`
	MerchantID       string         `json:"merchant_id"`
	AggregateType    string         `json:"aggregate_type"`
	AggregateID      string         `json:"aggregate_id"`
	AggregateVersion int            `json:"aggregate_version"`
	Position         int64          `json:"position"`
	Data             map[string]any `json:"data"`
	Cursor           string         `json:"cursor"`
}

type feedPage struct {
	Events     []feedEvent `json:"events"`
	NextCursor string      `json:"next_cursor"`
}

// readFeed sends GET /v1/events?params with key. It never touches t, so
// that goroutines may use it.
func (a *api) readFeed(key, params string) (feedPage, response, error) {
	r, err := a.send(http.MethodGet, "/v1/events?"+params, auth(key), nil)
	if err != nil {
		return feedPage{}, r, err
	}
	if r.Status != http.StatusOK {
		return feedPage{}, r, fmt.Errorf("GET /v1/events?%s answered %s", params, r)
	}
	var p feedPage
	if err := json.Unmarshal([]byte(r.Raw), &p); err != nil {
		return feedPage{}, r, err
	}
	if p.Events == nil {
		return feedPage{}, r, fmt.Errorf("events is not an array: %s", r.Raw)
	}
	return p, r, nil
}

// feed reads the feed and requires a page.
func (a *api) feed(key, params string) feedPage {
	a.t.Helper()
	p, _, err := a.readFeed(key, params)
	require.NoError(a.t, err)
	return p
}

// awaitFeed reads the feed with params until the page holds n events and
// returns it. Events become readable once every older transaction of the
// cluster has ended, so a read right after a write may not show it yet;
// once shown, the same read always shows the same page.
func (a *api) awaitFeed(key, params string, n int) feedPage {
	a.t.Helper()
	var p feedPage
	require.Eventually(a.t, func() bool {
		var err error
		p, _, err = a.readFeed(key, params+"&wait=0")
		return err == nil && len(p.Events) >= n
	}, 10*time.Second, 5*time.Millisecond, "GET /v1/events?%s never had %d events", params, n)
	require.Len(a.t, p.Events, n, "GET /v1/events?%s", params)
	return p
}

// after is the query of a read after cursor with more parameters.
func after(cursor, more string) string { return "after=" + url.QueryEscape(cursor) + "&" + more }

// awaitWaiting waits until n reads of the feed watch for events.
func (a *api) awaitWaiting(n int) {
	a.t.Helper()
	require.Eventually(a.t, func() bool { return a.w.feedWatcher.Waiting() == n }, 10*time.Second, time.Millisecond,
		"%d reads of the feed never waited", n)
}

// longPoll reads the feed in a goroutine; the page comes on the channel.
func (a *api) longPoll(key, params string) <-chan feedPage {
	out := make(chan feedPage, 1)
	go func() {
		p, _, err := a.readFeed(key, params)
		if err != nil {
			a.t.Error(err)
		}
		out <- p
	}()
	return out
}

// column returns the one column of q's rows.
func column[T any](t *testing.T, db *sql.DB, q string, args ...any) []T {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), q, args...)
	require.NoError(t, err)
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		require.NoError(t, rows.Scan(&v))
		out = append(out, v)
	}
	require.NoError(t, rows.Err())
	return out
}

func ids(events []feedEvent) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.ID)
	}
	return out
}

func cursorOf(t *testing.T, s string) query.FeedCursor {
	t.Helper()
	c, err := query.ParseFeedCursor(s)
	require.NoError(t, err, s)
	return c
}

// requireFollow checks that the events' cursors increase and that the page's
// next cursor is the last event's.
func requireFollow(t *testing.T, from string, p feedPage) {
	t.Helper()
	prev := cursorOf(t, from)
	for _, e := range p.Events {
		c := cursorOf(t, e.Cursor)
		require.True(t, prev.Transaction < c.Transaction || prev.Transaction == c.Transaction && prev.Position < c.Position,
			"cursor %v follows %v", c, prev)
		prev = c
	}
	if len(p.Events) > 0 {
		require.Equal(t, p.Events[len(p.Events)-1].Cursor, p.NextCursor)
	}
}

// rawOrderEvent inserts, in tx, a copy of the first event of stream from as
// the first event of a new stream (a decodable order.created of the same
// merchant), notified at commit as the write path's topic insert is. It
// returns the new event's id and position.
func rawOrderEvent(t *testing.T, tx *sql.Tx, from string) (id string, position int64) {
	t.Helper()
	err := tx.QueryRowContext(t.Context(), `
		INSERT INTO events (event_id, stream_type, stream_id, version, merchant_id, type, data, occurred_at, correlation_id, actor)
		SELECT gen_random_uuid(), stream_type, gen_random_uuid(), 1, merchant_id, type, data, occurred_at, correlation_id, actor
		FROM events WHERE stream_id = $1 AND version = 1
		RETURNING event_id::text, position`, from).Scan(&id, &position)
	require.NoError(t, err)
	_, err = tx.ExecContext(t.Context(), `SELECT pg_notify('hearth_topics', 'watermill_orders')`)
	require.NoError(t, err)
	return id, position
}

// The heart of the feed: a transaction that took the lower position and
// commits after one with a higher position. A reader by position would
// take the higher one and move past the lower one for ever; the feed holds
// the higher one back until the lower one's transaction has ended, then
// answers both, in commit-safe order, to a waiting read and to any later
// read alike.
//
// Not parallel: the open transaction holds back pg_snapshot_xmin, and with
// it every other test's projections and feed.
func TestEventFeedReadsInCommitOrder(t *testing.T) {
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	first := a.createOrder(a.opA, a.createCustomer(a.opA, "Ada"), 100)
	start := a.awaitFeed(a.opA, "limit=10", 1).NextCursor

	begin := func() *sql.Tx {
		conn, err := a.dbs.es.DB.Conn(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		tx, err := conn.BeginTx(ctx, nil)
		require.NoError(t, err)
		return tx
	}
	slow, fast := begin(), begin()
	lowID, low := rawOrderEvent(t, slow, first)
	highID, high := rawOrderEvent(t, fast, first)
	require.Less(t, low, high)
	require.NoError(t, fast.Commit())

	// The premise: the higher position is readable, the lower is not.
	readable := column[int64](t, a.dbs.es.DB, `SELECT position FROM events WHERE position >= $1 ORDER BY position`, low)
	require.Equal(t, []int64{high}, readable, "a reader by position would take %d and never see %d", high, low)

	page := a.feed(a.opA, after(start, "wait=0"))
	require.Empty(t, page.Events, "nothing while the lower position's transaction runs")
	require.Equal(t, start, page.NextCursor)

	waiting := a.longPoll(a.opA, after(start, "wait=20s"))
	a.awaitWaiting(1)
	require.NoError(t, slow.Commit())
	page = <-waiting
	require.NotEmpty(t, page.Events)
	require.Equal(t, lowID, page.Events[0].ID, "the lower position first, never the higher alone")
	requireFollow(t, start, page)

	both := a.awaitFeed(a.opA, after(start, "limit=10"), 2)
	require.Equal(t, []string{lowID, highID}, ids(both.Events))
	requireFollow(t, start, both)
	require.Equal(t, both.Events[:len(page.Events)], page.Events, "the same cursor continues with the same events")
}

// Writers commit concurrently over HTTP while a client follows the feed
// with long polls, storing each page's cursor: it sees every event of the
// merchant exactly once, in the order the events table gives by
// transaction and position, each aggregate's versions in order.
func TestEventFeedUnderConcurrentWrites(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	const writers, orders = 8, 12

	var target atomic.Int64
	target.Store(-1)
	var seen []feedEvent
	done := make(chan error, 1)
	go func() {
		cursor := ""
		for int64(len(seen)) != target.Load() {
			p, _, err := a.readFeed(a.opA, after(cursor, "limit=7&wait=2s"))
			if err != nil {
				done <- err
				return
			}
			seen = append(seen, p.Events...)
			if len(p.Events) == 0 && p.NextCursor != cursor {
				done <- fmt.Errorf("an empty page moved the cursor from %q to %q", cursor, p.NextCursor)
				return
			}
			cursor = p.NextCursor
		}
		done <- nil
	}()

	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range orders {
				r, err := a.send(http.MethodPost, "/v1/orders", auth(a.opA), map[string]any{"customer_id": customer, "amount_cents": 1})
				if err != nil || r.Status != http.StatusCreated {
					t.Errorf("create: %v %s", err, r)
					return
				}
				r, err = a.send(http.MethodPost, "/v1/orders/"+r.Body["id"].(string)+"/status", auth(a.opA), map[string]any{"status": "confirmed"})
				if err != nil || r.Status != http.StatusOK {
					t.Errorf("confirm: %v %s", err, r)
					return
				}
			}
		})
	}
	wg.Wait()
	want := column[string](t, a.dbs.es.DB,
		`SELECT event_id::text FROM events WHERE merchant_id = $1 ORDER BY transaction_id, position`, a.merchantA)
	require.Len(t, want, 2*writers*orders)
	target.Store(int64(len(want)))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatalf("the follower saw %d of %d events", len(seen), len(want))
	}
	require.Equal(t, want, ids(seen))
	versions := map[string]int{}
	for _, e := range seen {
		require.Equal(t, versions[e.AggregateID]+1, e.AggregateVersion, "%s of %s", e.Type, e.AggregateID)
		versions[e.AggregateID] = e.AggregateVersion
	}
	requireFollow(t, "", feedPage{Events: seen, NextCursor: seen[len(seen)-1].Cursor})
}

// A long poll is woken by the commit's notification: with a fallback poll
// of a minute, only the NOTIFY can answer it within its wait.
func TestEventFeedLongPollWokenByWrite(t *testing.T) {
	t.Parallel()
	a := setupConfigured(t, pgtest.NewDB(t), func(cfg *Config) { cfg.PollInterval = time.Minute }, nil)
	customer := a.createCustomer(a.opA, "Ada")
	start := a.feed(a.opA, "wait=0").NextCursor
	for range 3 {
		waiting := a.longPoll(a.opA, after(start, "wait=30s"))
		a.awaitWaiting(1)
		id := a.createOrder(a.opA, customer, 100)
		page := <-waiting
		require.Len(t, page.Events, 1, "the write's event, not an empty page after the wait")
		require.Equal(t, id, page.Events[0].AggregateID)
		require.Equal(t, "order.created", page.Events[0].Type)
		start = page.NextCursor
		a.awaitWaiting(0)
	}
}

// A wait that ends without an event answers an empty page with the same
// cursor, after the wait asked for (or the server's EVENT_FEED_WAIT, the
// default and the cap).
func TestEventFeedWaitEnds(t *testing.T) {
	t.Parallel()
	a := setupConfigured(t, pgtest.NewDB(t), func(cfg *Config) { cfg.EventFeedWait = time.Second }, nil)
	empty := a.feed(a.opB, "wait=0")
	require.Equal(t, feedPage{Events: []feedEvent{}, NextCursor: ""}, empty, "an empty feed")

	a.createOrder(a.opA, a.createCustomer(a.opA, "Ada"), 100)
	cursor := a.awaitFeed(a.opA, "limit=10", 1).NextCursor
	for _, wait := range []string{"wait=200ms", "wait=1h", ""} {
		started := time.Now()
		page := a.feed(a.opA, after(cursor, wait))
		require.Equal(t, feedPage{Events: []feedEvent{}, NextCursor: cursor}, page, wait)
		least := 200 * time.Millisecond
		if wait != "wait=200ms" {
			least = time.Second // capped at, or defaulting to, EVENT_FEED_WAIT
		}
		require.GreaterOrEqual(t, time.Since(started), least, "%q waited", wait)
	}
}

// Over EVENT_FEED_MAX_WAITS a long poll answers at once: 503 when it has
// nothing, its events when it has some; a read that does not wait is
// served as ever.
func TestEventFeedMaxWaits(t *testing.T) {
	t.Parallel()
	a := setupConfigured(t, pgtest.NewDB(t), func(cfg *Config) { cfg.EventFeedMaxWaits = 1 }, nil)
	a.createOrder(a.opA, a.createCustomer(a.opA, "Ada"), 100)
	cursor := a.awaitFeed(a.opA, "limit=10", 1).NextCursor

	waiting := a.longPoll(a.opB, "wait=30s")
	a.awaitWaiting(1)
	r := a.do(http.MethodGet, "/v1/events?"+after(cursor, "wait=5s"), a.opA, nil)
	requireProblem(t, r, http.StatusServiceUnavailable, "/problems/too-many-waits")
	require.Equal(t, "1", r.Header.Get("Retry-After"))
	require.Equal(t, cursor, a.feed(a.opA, after(cursor, "wait=0")).NextCursor)
	require.Len(t, a.feed(a.opA, "wait=5s").Events, 1)

	order := a.createOrder(a.opB, a.createCustomer(a.opB, "Bob"), 100)
	page := <-waiting
	require.Len(t, page.Events, 1)
	require.Equal(t, order, page.Events[0].AggregateID)
	a.awaitWaiting(0)
	require.Equal(t, cursor, a.feed(a.opA, after(cursor, "wait=100ms")).NextCursor, "the slot is free again")
}

// Operator keys read their own merchant's feed only; worker and admin keys
// are refused.
func TestEventFeedAccess(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customerA, customerB := a.createCustomer(a.opA, "Ada"), a.createCustomer(a.opB, "Bob")
	orderA, orderB := a.createOrder(a.opA, customerA, 100), a.createOrder(a.opB, customerB, 200)

	pageA, pageB := a.awaitFeed(a.opA, "limit=10", 1), a.awaitFeed(a.opB, "limit=10", 1)
	require.Equal(t, orderA, pageA.Events[0].AggregateID)
	require.Equal(t, a.merchantA, pageA.Events[0].MerchantID)
	require.Equal(t, orderB, pageB.Events[0].AggregateID)
	require.Equal(t, a.merchantB, pageB.Events[0].MerchantID)
	// Another merchant's cursor is only a place in the event store: it
	// shows nothing of theirs.
	a.createOrder(a.opA, customerA, 300)
	laterA := a.awaitFeed(a.opA, "limit=10", 2).NextCursor
	require.Equal(t, []string{orderB}, []string{a.feed(a.opB, after(pageA.NextCursor, "wait=0")).Events[0].AggregateID})
	require.Empty(t, a.feed(a.opB, after(laterA, "wait=0")).Events)

	requireProblem(t, a.do(http.MethodGet, "/v1/events", a.worker, nil), http.StatusForbidden, "/problems/forbidden")
	requireProblem(t, a.do(http.MethodGet, "/v1/events", a.admin, nil), http.StatusForbidden, "/problems/forbidden")
	requireProblem(t, a.do(http.MethodGet, "/v1/events", "", nil), http.StatusUnauthorized, "/problems/unauthenticated")
}

// Bad parameters are 400 naming the parameter; nothing is read.
func TestEventFeedBadInput(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	a.createOrder(a.opA, a.createCustomer(a.opA, "Ada"), 100)
	good := a.awaitFeed(a.opA, "limit=10", 1).NextCursor
	for params, field := range map[string]string{
		"after=1842":                         "after",
		"after=" + good[:len(good)-1]:        "after",
		"after=" + good + "A":                "after",
		"after=" + url.QueryEscape(" "+good): "after",
		"after=" + good + "&after=" + good:   "after",
		"types=order.created,":               "types",
		"types=order.teleported":             "types",
		"types=webhook_endpoint.ping":        "types",
		"types=":                             "types",
		"limit=0":                            "limit",
		"limit=1001":                         "limit",
		"limit=ten":                          "limit",
		"limit=5&limit=6":                    "limit",
		"wait=-1s":                           "wait",
		"wait=5":                             "wait",
		"wait=1s&wait=2s":                    "wait",
	} {
		r := a.do(http.MethodGet, "/v1/events?"+params, a.opA, nil)
		requireProblem(t, r, http.StatusBadRequest, "/problems/malformed-request")
		require.Equal(t, []string{field}, problemFields(r), "%s: %s", params, r)
	}
}

// types keeps the events of the types named; the cursor still moves past
// the others, so the next read does not look at them again.
func TestEventFeedTypes(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	var confirmed []string
	for range 3 {
		id := a.createOrder(a.opA, customer, 100)
		a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+id+"/status", a.opA, map[string]any{"status": "confirmed"})
		confirmed = append(confirmed, id)
	}
	a.createOrder(a.opA, customer, 100) // last: order.created only
	all := a.awaitFeed(a.opA, "limit=10", 7)

	page := a.feed(a.opA, "types=order.status_changed&wait=0")
	var got []string
	for _, e := range page.Events {
		require.Equal(t, "order.status_changed", e.Type)
		require.Equal(t, "confirmed", e.Data["to"])
		got = append(got, e.AggregateID)
	}
	require.Equal(t, confirmed, got)
	require.Equal(t, all.NextCursor, page.NextCursor, "past the last order.created, which the filter left out")
	require.Empty(t, a.feed(a.opA, after(page.NextCursor, "types=order.status_changed&wait=0")).Events)

	both := a.feed(a.opA, "types=order.status_changed&types=order.created,order.status_changed&limit=2&wait=0")
	require.Equal(t, ids(all.Events[:2]), ids(both.Events), "a repeated parameter and a list mean the same")
}

// A client keeps its cursor across a restart: a new server instance (new
// pools, new notifier, new projections) continues exactly where the old one
// left off, with events written while it was down.
func TestEventFeedContinuesAcrossRestart(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	var cursor string
	var before []string
	t.Run("first instance", func(t *testing.T) {
		a := setup(t, urls)
		customer := a.createCustomer(a.opA, "Ada")
		for range 4 {
			a.createOrder(a.opA, customer, 100)
		}
		a.awaitFeed(a.opA, "limit=10", 4)
		p := a.feed(a.opA, "limit=3&wait=0")
		require.Len(t, p.Events, 3)
		cursor, before = p.NextCursor, ids(p.Events)
		a.createOrder(a.opA, customer, 100)
	}) // stopped: its server, projections, notifier and pools
	t.Run("second instance", func(t *testing.T) {
		a := setup(t, urls) // the same merchants, new keys
		customer := a.createCustomer(a.opA, "Bea")
		a.createOrder(a.opA, customer, 100)
		rest := a.awaitFeed(a.opA, after(cursor, "limit=10"), 3)
		requireFollow(t, cursor, rest)
		all := a.feed(a.opA, "wait=0")
		require.Len(t, all.Events, 6)
		require.Equal(t, ids(all.Events), append(slices.Clone(before), ids(rest.Events)...))
	})
}

// An event the feed cannot give in its public form stops the feed before
// it, with a problem naming it: the events before it are answered, none
// after it is. Once an operator skips it, it reads as *.event_skipped.
func TestEventFeedUnpublishableEvent(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	customer := a.createCustomer(a.opA, "Ada")
	first := a.createOrder(a.opA, customer, 100)
	var badID, badStream string
	err := a.dbs.es.DB.QueryRowContext(ctx, `
		INSERT INTO events (event_id, stream_type, stream_id, version, merchant_id, type, data, occurred_at, correlation_id, actor)
		SELECT gen_random_uuid(), stream_type, gen_random_uuid(), 1, merchant_id, 'OrderTeleported', '{}', occurred_at, correlation_id, actor
		FROM events WHERE stream_id = $1
		RETURNING event_id::text, stream_id::text`, first).Scan(&badID, &badStream)
	require.NoError(t, err)
	a.createOrder(a.opA, customer, 200)

	page := a.awaitFeed(a.opA, "limit=10", 1)
	require.Equal(t, first, page.Events[0].AggregateID, "the event before it")
	for _, params := range []string{after(page.NextCursor, "wait=0"), after(page.NextCursor, "types=order.created&wait=0")} {
		var r response
		require.Eventually(t, func() bool {
			var err error
			r, err = a.send(http.MethodGet, "/v1/events?"+params, auth(a.opA), nil)
			return err == nil && r.Status != http.StatusOK
		}, 10*time.Second, 5*time.Millisecond, "the unpublishable event never became readable")
		requireProblem(t, r, http.StatusInternalServerError, "/problems/unpublishable-event")
		require.Equal(t, badID, r.Body["event_id"], "%s", r)
		require.Contains(t, r.Body["detail"], "OrderTeleported")
	}

	_, err = a.dbs.es.DB.ExecContext(ctx, `INSERT INTO skipped_events (projection, event_id, stream_id, version, type, skipped_by, reason)
		VALUES ('orders', $1, $2, 1, 'OrderTeleported', 'key:test', 'no such event')`, badID, badStream)
	require.NoError(t, err)
	rest := a.awaitFeed(a.opA, after(page.NextCursor, "limit=10"), 2)
	require.Equal(t, badID, rest.Events[0].ID)
	require.Equal(t, "order.event_skipped", rest.Events[0].Type)
	require.Equal(t, map[string]any{"of": "OrderTeleported"}, rest.Events[0].Data)
	require.Equal(t, "order.created", rest.Events[1].Type)
}

// A stored event of a known type that lacks a value Hearth always writes
// (here a hand-edited OrderStatusChanged whose "to" is null) has no public
// form either: the feed stops before it with the problem naming the event
// and the field, where it answered order.status_changed to "", which no
// integrator can act on and the document's status enum refuses.
func TestEventFeedStopsBeforeAnEventMissingAValue(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	customer := a.createCustomer(a.opA, "Ada")
	first := a.createOrder(a.opA, customer, 100)
	var badID string
	err := a.dbs.es.DB.QueryRowContext(ctx, `
		INSERT INTO events (event_id, stream_type, stream_id, version, merchant_id, type, data, occurred_at, correlation_id, actor)
		SELECT gen_random_uuid(), stream_type, stream_id, 2, merchant_id, 'OrderStatusChanged', '{"from":"pending","to":null}',
		       occurred_at, correlation_id, actor
		FROM events WHERE stream_id = $1
		RETURNING event_id::text`, first).Scan(&badID)
	require.NoError(t, err)

	page := a.awaitFeed(a.opA, "limit=10", 1)
	require.Equal(t, "order.created", page.Events[0].Type, "the event before it")
	var r response
	require.Eventually(t, func() bool {
		var err error
		r, err = a.send(http.MethodGet, "/v1/events?"+after(page.NextCursor, "wait=0"), auth(a.opA), nil)
		return err == nil && (r.Status != http.StatusOK || len(r.Body["events"].([]any)) > 0)
	}, 10*time.Second, 5*time.Millisecond, "the edited event never became readable")
	requireProblem(t, r, http.StatusInternalServerError, "/problems/unpublishable-event")
	require.Equal(t, badID, r.Body["event_id"], "%s", r)
	require.Contains(t, r.Body["detail"], `"to"`)
}

// A well-formed cursor past every transaction of the server (another
// server's, or this database's before a restore from a dump) was never
// answered: it is 400 naming after, with and without a wait, not an empty
// page a follower would wait on for ever. The last cursor answered still
// reads on.
func TestEventFeedRefusesACursorFromTheFuture(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	a.createOrder(a.opA, a.createCustomer(a.opA, "Ada"), 100)
	a.awaitFeed(a.opA, "limit=10", 1)

	future := query.FeedCursor{Transaction: 1 << 40, Position: 1}.String()
	for _, wait := range []string{"wait=0", "wait=1s"} {
		r := a.do(http.MethodGet, "/v1/events?"+after(future, wait), a.opA, nil)
		requireProblem(t, r, http.StatusBadRequest, "/problems/malformed-request") // as a malformed cursor
		require.Equal(t, []string{"after"}, problemFields(r), "%s", r)
	}
	r := a.must(http.StatusOK, http.MethodGet, "/v1/events?limit=10&wait=0", a.opA, nil)
	next := r.Body["next_cursor"].(string)
	r = a.must(http.StatusOK, http.MethodGet, "/v1/events?"+after(next, "wait=0"), a.opA, nil)
	require.Empty(t, r.Body["events"], "the head of the feed: nothing after it, and no error")
}

// A page of the feed reads the data keys of its events' customers in one
// lookup, not one per customer: a page of events about 50 customers whose
// keys no instance has cached (events of a while ago, read by a client
// catching up, or by an instance that never wrote them) costs the vault
// one query. One per customer, a page of 1,000 cost 1,000 round trips,
// and a read with types (up to 10,000 events looked at) 10,000, each on
// the request pool, for one request of one merchant.
func TestEventFeedReadsAPagesDataKeysAtOnce(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	a := setup(t, urls)
	const customers = 50
	a.sealedOrders(customers)
	// Readable (below every running transaction's xmin), read without
	// opening a key.
	plain, err := pubsub.NewFeed(a.dbs.es.DB, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		entries, err := plain.Page(t.Context(), a.merchantA, query.FeedCursor{}, 1000)
		return err == nil && len(entries) >= customers
	}, 10*time.Second, 5*time.Millisecond)

	cold, queries := coldVault(t, urls, a.cfg.MasterKeys)
	feed, err := pubsub.NewFeed(a.dbs.es.DB, cold)
	require.NoError(t, err)
	entries, err := feed.Page(t.Context(), a.merchantA, query.FeedCursor{}, 1000)
	require.NoError(t, err)
	opened := 0
	for _, e := range entries {
		require.NoError(t, e.Err)
		if c, ok := e.Stored.Event.(order.Created); ok {
			require.Equal(t, "gate code 1234", c.Notes)
			opened++
		}
	}
	require.Equal(t, customers, opened)
	require.LessOrEqual(t, queries.Load(), int64(1), "the vault's queries for a page of %d customers' events", customers)
}

// sealedOrders creates n customers of merchant A and an order of each, whose
// notes ("gate code 1234") are sealed with its customer's data key.
func (a *api) sealedOrders(n int) {
	a.t.Helper()
	for i := range n {
		customer := a.createCustomer(a.opA, fmt.Sprintf("Sealed Customer %d", i))
		_, err := a.w.app.Commands.Orders.Create(a.t.Context(), command.CreateOrder{
			Meta:       event.Meta{MerchantID: a.merchantA, Actor: "key:" + a.opAKeyID, CorrelationID: uuid.New(), OccurredAt: time.Now()},
			CustomerID: customer, AmountCents: 100, Notes: "gate code 1234"})
		require.NoError(a.t, err)
	}
}

// coldVault is a vault on the event store with nothing cached, and the
// count of its queries.
func coldVault(t *testing.T, urls pgtest.URLs, ring *keyring.Ring) (*vault.Vault, *atomic.Int64) {
	t.Helper()
	cfg, err := pgx.ParseConfig(urls.EventStore)
	require.NoError(t, err)
	queries := &atomic.Int64{}
	db := sql.OpenDB(countingConnector{Connector: stdlib.GetConnector(*cfg), queries: queries})
	t.Cleanup(func() { _ = db.Close() })
	v, err := vault.New(db, ring)
	require.NoError(t, err)
	return v, queries
}

// countingConnector counts the queries of the connections it makes.
type countingConnector struct {
	driver.Connector
	queries *atomic.Int64
}

func (c countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: conn.(*stdlib.Conn), queries: c.queries}, nil
}

type countingConn struct {
	*stdlib.Conn
	queries *atomic.Int64
}

func (c countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.queries.Add(1)
	return c.Conn.QueryContext(ctx, query, args)
}

// A cursor names the event it was answered after, and the feed reads on
// from that event's place. A restore of a backup (a point in time just
// before an operator's mistake, say) loses the events written after it,
// and the server's transaction counter goes back with it: the events
// written from then on take transaction ids the lost ones had, below the
// cursors feed clients kept of the lost events. Such a cursor is refused
// (400 naming after: start again) only while the server has not run past
// its transaction; once it has, it was read as a place in the feed, and
// every event written since the restore that sorts before it was left out,
// for good, from a client that followed the documented loop. A cursor
// made up of a place no event holds was read the same way.
//
// The restore is played on the events table: the lost event deleted, the
// event written after it inserted with a transaction id the lost one's
// preceded, as the restored server's counter gives it.
func TestEventFeedRefusesACursorOfAnEventItDoesNotHold(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	customer := a.createCustomer(a.opA, "Ada")
	kept := a.createOrder(a.opA, customer, 100)
	backup := a.awaitFeed(a.opA, "limit=10", 1).NextCursor // the backup is taken here
	lost := a.createOrder(a.opA, customer, 200)
	stored := a.awaitFeed(a.opA, after(backup, "limit=10"), 1).NextCursor // the client's cursor, past the lost event
	lostAt := cursorOf(t, stored)

	// The restore: the lost order's event is gone, and the next write
	// commits under a transaction id below the client's cursor's.
	_, err := a.dbs.es.DB.ExecContext(ctx, `DELETE FROM events WHERE stream_id = $1`, lost)
	require.NoError(t, err)
	var written string
	err = a.dbs.es.DB.QueryRowContext(ctx, `
		INSERT INTO events (event_id, stream_type, stream_id, version, merchant_id, type, data, occurred_at, correlation_id, actor, transaction_id)
		SELECT gen_random_uuid(), stream_type, gen_random_uuid(), 1, merchant_id, type, data, occurred_at, correlation_id, actor, $2::text::xid8
		FROM events WHERE stream_id = $1 AND version = 1
		RETURNING event_id::text`, kept, strconv.FormatUint(lostAt.Transaction-1, 10)).Scan(&written)
	require.NoError(t, err)
	// And one written later, after the lost event's place: a read from
	// its cursor finds something to answer.
	later := a.createOrder(a.opA, customer, 300)
	since := a.awaitFeed(a.opA, after(backup, "limit=10"), 2)
	require.Equal(t, written, since.Events[0].ID, "the event written after the restore is in the feed, after the backup's cursor")
	require.Equal(t, later, since.Events[1].AggregateID)

	made := query.FeedCursor{Transaction: lostAt.Transaction, Position: lostAt.Position + 1_000_000}.String()
	for name, cursor := range map[string]string{"the lost event's cursor": stored, "a made-up cursor": made} {
		for _, wait := range []string{"wait=0", "wait=1s"} {
			r := a.do(http.MethodGet, "/v1/events?"+after(cursor, wait), a.opA, nil)
			require.Equal(t, http.StatusBadRequest, r.Status,
				"%s names no event the server holds, yet GET /v1/events?%s read on from its place, leaving out the event written since the restore: %s", name, wait, r)
			requireProblem(t, r, http.StatusBadRequest, "/problems/malformed-request")
			require.Equal(t, []string{"after"}, problemFields(r), "%s", r)
		}
	}
}
