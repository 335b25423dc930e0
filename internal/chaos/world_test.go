package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"hearth/adapters/pubsub"
	"hearth/adapters/readmodel"
	"hearth/adapters/vault"
	"hearth/app/access"
	"hearth/app/query"
	"hearth/internal/advisory"
	"hearth/internal/aggregates"
	"hearth/internal/keyring"
	"hearth/internal/pgtest"
	"hearth/internal/refdata"
)

// world is a running Hearth: an api process, workers, and the databases.
type world struct {
	t        *testing.T
	urls     pgtest.URLs
	es, rm   *bun.DB
	api      *proc
	workers  []*proc
	key      string // an operator key
	merchant string
	customer string
	staff    string
	item     string   // a catalog item, for the writer's service plans
	started  int      // workers started so far, for names
	env      []string // more environment for every process (NAME=value)
}

// newWorld starts an api process and n workers on fresh databases and
// creates a merchant, an operator key and a customer.
func newWorld(t *testing.T, urls pgtest.URLs, workers int, env ...string) *world {
	t.Helper()
	w := &world{t: t, urls: urls, es: pgtest.Open(t, urls.EventStore), rm: pgtest.Open(t, urls.ReadModel), env: env}
	ref, err := refdata.New(w.es)
	require.NoError(t, err)
	k, err := ref.CreateKey(t.Context(), "chaos", access.Operator, "")
	require.NoError(t, err)
	w.key, w.merchant = k.Secret, k.MerchantID
	w.api = start(t, "api", "api", urls, env...)
	for range workers {
		w.addWorker()
	}
	var c struct {
		ID string `json:"id"`
	}
	status, err := call(http.MethodPost, w.url("/v1/customers"), w.key, map[string]any{"name": "Chaos Customer"}, &c)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	w.customer = c.ID
	status, err = call(http.MethodPost, w.url("/v1/staff"), w.key, map[string]any{"name": "Chaos Staff"}, &c)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	w.staff = c.ID
	status, err = call(http.MethodPost, w.url("/v1/catalog-items"), w.key, map[string]any{"name": "Chaos Clean", "base_price_cents": 100}, &c)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status)
	w.item = c.ID
	return w
}

func (w *world) url(path string) string { return "http://" + w.api.addr + path }

// addWorker starts one more worker.
func (w *world) addWorker() *proc {
	p := w.spawnWorker()
	p.awaitReady(w.t)
	return p
}

// spawnWorker is addWorker without the wait.
func (w *world) spawnWorker() *proc {
	w.started++
	p := spawn(w.t, fmt.Sprintf("worker%d", w.started), "worker", w.urls, w.env...)
	w.workers = append(w.workers, p)
	return p
}

// replace starts a new worker in place of p, which has exited.
func (w *world) replace(p *proc) {
	w.respawn(p).awaitReady(w.t)
}

// respawn is replace without the wait.
func (w *world) respawn(p *proc) *proc {
	i := slices.Index(w.workers, p)
	w.workers = slices.Delete(w.workers, i, i+1)
	return w.spawnWorker()
}

// settledSpread waits until every projection has one leader and the
// workers share the units fairly: none leads more than its fair share (all
// the units, the projections and webhook delivery, divided by the workers,
// rounded up). It returns each projection's leader and term.
func (w *world) settledSpread() map[string]lead {
	w.t.Helper()
	var out map[string]lead
	require.Eventually(w.t, func() bool {
		var all map[*proc]readiness
		var settled bool
		if out, all, settled = leaders(w.workers); !settled {
			return false
		}
		for _, r := range all {
			if share := (r.AllUnits + len(w.workers) - 1) / len(w.workers); r.Leading > share {
				return false
			}
		}
		return true
	}, 2*time.Minute, 10*time.Millisecond, "every projection led, no worker over its fair share of the units")
	return out
}

// createOrder creates an order through the API and returns its id.
func (w *world) createOrder() string {
	w.t.Helper()
	var o struct {
		ID string `json:"id"`
	}
	status, err := call(http.MethodPost, w.url("/v1/orders"), w.key, map[string]any{"customer_id": w.customer, "amount_cents": 1000}, &o)
	require.NoError(w.t, err)
	require.Equal(w.t, http.StatusCreated, status)
	return o.ID
}

// patchNotes changes an order's notes through the API (one event).
func (w *world) patchNotes(id, notes string) (int, error) {
	return call(http.MethodPatch, w.url("/v1/orders/"+id), w.key, map[string]any{"notes": notes}, nil)
}

// writer issues commands through the API until stopped: it creates orders
// and changes their notes and amounts. Failures (Postgres restarting, a
// conflict) are counted, not fatal: the checks compare the read model with
// whatever the event store holds.
type writer struct {
	ok, failed atomic.Int64
	stop       chan struct{}
	done       chan struct{}
	// acked is the highest version each order's commands were acknowledged
	// with (200 or 201); read it only once the writer is halted.
	acked map[string]int

	mu       sync.Mutex
	ackTimes []time.Time // when each acknowledgement arrived, in order
}

// acksSince returns the times of the acknowledgements that arrived after
// from, and the last one before it (zero if none).
func (wr *writer) acksSince(from time.Time) (before time.Time, after []time.Time) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	i, _ := slices.BinarySearchFunc(wr.ackTimes, from, func(a, b time.Time) int { return a.Compare(b) })
	if i > 0 {
		before = wr.ackTimes[i-1]
	}
	return before, slices.Clone(wr.ackTimes[i:])
}

// retireAt is the version at which the writer stops changing an order,
// request or plan and makes a new one: a long run (make chaos) would
// otherwise reach order.MaxEvents, or plan.MaxPauses by pausing and
// resuming the same few plans, and count the refusals as failed writes.
const retireAt = 150

// startWriter starts the writer; it is halted when the test ends, unless
// the test halted it.
func (w *world) startWriter(interval time.Duration) *writer {
	wr := &writer{stop: make(chan struct{}), done: make(chan struct{}), acked: map[string]int{}}
	w.t.Cleanup(func() {
		select {
		case <-wr.done:
		default:
			wr.halt()
		}
	})
	go func() {
		defer close(wr.done)
		var orders, requests, plans []string
		tick := time.NewTicker(interval)
		defer tick.Stop()
		window := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		for i := 0; ; i++ {
			select {
			case <-wr.stop:
				return
			case <-tick.C:
			}
			var o struct {
				ID      string `json:"id"`
				Version int    `json:"version"`
			}
			var status int
			var err error
			// Each projection gets an event every third tick: orders,
			// service requests, and schedules (an order's assignment);
			// every seventh tick goes to service plans instead.
			switch {
			case i%7 == 6 && len(plans) < 5:
				status, err = call(http.MethodPost, w.url("/v1/plans"), w.key, map[string]any{"customer_id": w.customer,
					"catalog_item_id": w.item, "window": map[string]any{"start": "09:00", "end": "10:00"},
					"recurrence": map[string]any{"frequency": "monthly", "interval": 1, "start": time.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)}}, &o)
				if err == nil && status == http.StatusCreated {
					plans = append(plans, o.ID)
				}
			case i%7 == 6:
				id := plans[rand.IntN(len(plans))]
				action := "pause"
				if i%2 == 0 {
					action = "resume"
				}
				status, err = call(http.MethodPost, w.url("/v1/plans/"+id+"/"+action), w.key, nil, &o)
			case i%3 == 0 && (len(orders) < 10 || i%5 == 0):
				status, err = call(http.MethodPost, w.url("/v1/orders"), w.key, map[string]any{"customer_id": w.customer, "amount_cents": i}, &o)
				if err == nil && status == http.StatusCreated {
					orders = append(orders, o.ID)
				}
			case i%3 == 0:
				id := orders[rand.IntN(len(orders))]
				status, err = call(http.MethodPatch, w.url("/v1/orders/"+id), w.key, map[string]any{"notes": fmt.Sprint("note ", i), "amount_cents": i}, &o)
			case i%3 == 1 && (len(requests) < 10 || i%5 == 0):
				status, err = call(http.MethodPost, w.url("/v1/service-requests"), w.key, map[string]any{"customer_id": w.customer, "content": fmt.Sprint("request ", i), "source": "phone"}, &o)
				if err == nil && status == http.StatusCreated {
					requests = append(requests, o.ID)
				}
			case i%3 == 1:
				id := requests[rand.IntN(len(requests))]
				status, err = call(http.MethodPatch, w.url("/v1/service-requests/"+id), w.key, map[string]any{"notes": fmt.Sprint("note ", i)}, &o)
			case len(orders) > 0:
				// A new window each time, so the staff member is never booked twice.
				window = window.Add(time.Hour)
				id := orders[rand.IntN(len(orders))]
				status, err = call(http.MethodPut, w.url("/v1/orders/"+id+"/assignment"), w.key, map[string]any{
					"staff_id": w.staff, "start_at": window, "end_at": window.Add(30 * time.Minute)}, &o)
			default:
				continue
			}
			if err == nil && status < 300 {
				wr.ok.Add(1)
				wr.acked[o.ID] = max(wr.acked[o.ID], o.Version)
				if o.Version >= retireAt {
					// Well short of the bounds of a record's edits and of a
					// plan's pauses (422 past them): a new one takes its place.
					del := func(id string) bool { return id == o.ID }
					orders, requests, plans = slices.DeleteFunc(orders, del), slices.DeleteFunc(requests, del), slices.DeleteFunc(plans, del)
				}
				wr.mu.Lock()
				wr.ackTimes = append(wr.ackTimes, time.Now())
				wr.mu.Unlock()
			} else {
				wr.failed.Add(1)
			}
		}
	}()
	return wr
}

func (wr *writer) halt() {
	close(wr.stop)
	<-wr.done
}

// checkExactlyOnce waits until the read model agrees with the event store,
// then checks that every event was applied exactly once: exactly one
// change-log row per event and none for anything else, and each order row
// equal to the fold of its events. It returns the number of events.
//
// The writer has stopped, but the event store may still grow: the visit
// generator's leader makes the visits of the plans it wrote at its next
// run (every PLAN_INTERVAL, and at the start of each term), and a command
// whose client gave up during a fault may still commit. So the whole check
// runs again until it holds; a missing or second application never does.
func (w *world) checkExactlyOnce() int {
	t := w.t
	t.Helper()
	var events int
	require.EventuallyWithT(t, func(c *assert.CollectT) { events = w.agree(c) }, 2*time.Minute, 100*time.Millisecond,
		"the read model agrees with the event store: every event applied exactly once")
	return events
}

// agree is one attempt of checkExactlyOnce.
func (w *world) agree(t require.TestingT) int {
	ctx := context.Background()
	var events []string
	require.NoError(t, w.es.NewRaw("SELECT event_id::text FROM events ORDER BY event_id").Scan(ctx, &events))
	var changes []string
	require.NoError(t, w.rm.NewRaw("SELECT event_id::text FROM change_log ORDER BY event_id").Scan(ctx, &changes))
	require.Equal(t, events, changes, "exactly one change-log row per event")

	// Every row of every projection is at its stream's last version.
	for _, f := range aggregates.All() {
		versions := func(db *bun.DB, query string, args ...any) map[string]int {
			var rows []struct {
				ID      string `bun:"id"`
				Version int    `bun:"version"`
			}
			require.NoError(t, db.NewRaw(query, args...).Scan(ctx, &rows))
			out := map[string]int{}
			for _, r := range rows {
				out[r.ID] = r.Version
			}
			return out
		}
		want := versions(w.es, "SELECT stream_id::text AS id, max(version) AS version FROM events WHERE stream_type = ? GROUP BY stream_id", f.Type)
		got := versions(w.rm, "SELECT id::text AS id, version FROM ?", bun.Ident(f.Table))
		require.Equal(t, want, got, "%s rows at their streams' last versions", f.Projection)
	}

	var ids []string
	require.NoError(t, w.es.NewRaw("SELECT DISTINCT stream_id::text FROM events WHERE stream_type = ?", pubsub.OrderStream.Type).Scan(ctx, &ids))
	// The workers seal personal fields: the fold opens them as they do.
	ring, err := keyring.Parse(masterKey)
	require.NoError(t, err)
	vlt, err := vault.New(w.es.DB, ring)
	require.NoError(t, err)
	store, err := pubsub.NewStore(w.es, nil, vlt)
	require.NoError(t, err)
	orders, err := readmodel.NewOrders(w.rm)
	require.NoError(t, err)
	for _, id := range ids {
		stream, err := store.Read(ctx, pubsub.OrderStream, w.merchant, id)
		require.NoError(t, err)
		want, err := query.FoldOrder(stream)
		require.NoError(t, err)
		got, err := orders.Get(ctx, query.Scope{MerchantID: w.merchant}, id)
		require.NoError(t, err)
		wantJSON, _ := json.Marshal(want)
		gotJSON, _ := json.Marshal(got)
		require.JSONEq(t, string(wantJSON), string(gotJSON), "order %s equals the fold of its %d events", id, len(stream))
	}
	return len(events)
}

// checkAcknowledged checks that the event store holds every command the
// writer was told had succeeded: nothing acknowledged was lost.
func (w *world) checkAcknowledged(wr *writer) {
	w.t.Helper()
	var rows []struct {
		ID      string `bun:"id"`
		Version int    `bun:"version"`
	}
	require.NoError(w.t, w.es.NewRaw("SELECT stream_id::text AS id, max(version) AS version FROM events GROUP BY stream_id").Scan(context.Background(), &rows))
	stored := map[string]int{}
	for _, r := range rows {
		stored[r.ID] = r.Version
	}
	for id, v := range wr.acked {
		require.GreaterOrEqual(w.t, stored[id], v, "order %s: version %d was acknowledged", id, v)
	}
}

// maxChangeID is the newest change-log row's id (0 on an error: it runs
// inside Eventually too).
func (w *world) maxChangeID() int64 {
	var id int64
	_ = w.rm.DB.QueryRow("SELECT coalesce(max(id), 0) FROM change_log").Scan(&id)
	return id
}

// projectedUnder reports whether a change-log row of projection newer than
// after was written under a term newer than term: a new leader of that
// projection is projecting.
func (w *world) projectedUnder(projection string, after, term int64) bool {
	var yes bool
	err := w.rm.DB.QueryRow("SELECT EXISTS (SELECT FROM change_log WHERE aggregate_type = $1 AND id > $2 AND term > $3)",
		aggregateType(projection), after, term).Scan(&yes)
	return err == nil && yes
}

// projected reports whether a change-log row of projection newer than after
// exists.
func (w *world) projected(projection string, after int64) bool {
	return w.projectedUnder(projection, after, 0)
}

// aggregateType is the stream type a projection projects.
func aggregateType(projection string) string {
	for _, f := range aggregates.All() {
		if f.Projection == projection {
			return f.Type
		}
	}
	panic("no projection " + projection)
}

// terminateLockSession ends the session holding a projection's leadership
// lock, as an operator (or a connection killer) would.
func (w *world) terminateLockSession(projection string) {
	w.t.Helper()
	key := advisory.Key(advisory.Projection(projection))
	var n int
	require.NoError(w.t, w.es.DB.QueryRow(`
		SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks l
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND l.classid::bigint = $1 AND l.objid::bigint = $2`, uint32(uint64(key)>>32), uint32(uint64(key))).Scan(&n))
	require.Equal(w.t, 1, n, "one session holds the lock of %s", projection)
}

// figures summarises durations: count, median and max.
type figures []time.Duration

func (f figures) String() string {
	if len(f) == 0 {
		return "none"
	}
	s := slices.Clone(f)
	slices.Sort(s)
	median := s[len(s)/2]
	if len(s)%2 == 0 {
		median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return fmt.Sprintf("n=%d median=%v max=%v", len(s), median.Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}
