package webhooks

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"hearth/adapters/readmodel"
	"hearth/app/publicevent"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/webhook"
	"hearth/internal/aggregates"
	"hearth/internal/database"
	"hearth/internal/tracing"
)

const (
	// inFlightPerEndpoint is how many deliveries one endpoint gets at once
	// (each of another aggregate).
	inFlightPerEndpoint = 8
	// claimBatch is how many deliveries one round of a worker claims at
	// most.
	claimBatch = 32
	// holdMargin is added to the timeout for a claim's hold: the time after
	// which a delivery claimed by a leader that died is tried again. A send
	// starts only while it can end within the hold (send).
	holdMargin = 5 * time.Second
	// rescanEvery is how often the dispatcher looks for pending deliveries
	// that no notification announced (a lost notification, a missed
	// reconnect, a parked event replayed).
	rescanEvery = 10 * time.Second
	// walkLimit bounds the endpoints one look (a rescan, or the look after
	// a notification) walks: one index probe each. The next look goes on
	// from where this one stopped.
	walkLimit = 1000
	// pruneEvery and pruneBatch: finished deliveries older than Keep are
	// deleted this often, this many rows per statement.
	pruneEvery = 10 * time.Minute
	pruneBatch = 1000
	// failBatch is how many pending deliveries of a disabled endpoint one
	// transaction fails.
	failBatch = 1000
	// stepTimeout bounds one round's transaction.
	stepTimeout = 10 * time.Second
)

// DispatcherConfig is what NewDispatcher needs.
type DispatcherConfig struct {
	// DB is the event-store database, a pool opened by package database (it
	// must honour the fencing check sent with BEGIN).
	DB *sql.DB
	// Sender sends the deliveries. Required.
	Sender *Sender
	// Secrets opens the endpoints' sealed signing secrets (the master
	// keys). Required.
	Secrets Sealer
	// Schedule is when failed deliveries are tried again, and for how
	// long. Required (cmd/app Config: WEBHOOK_RETRY_*).
	Schedule webhook.Schedule
	// Keep is how long finished deliveries stay in the log
	// (WEBHOOK_DELIVERY_KEEP). Required.
	Keep time.Duration
	// Decoders open the events' sealed fields for the bodies (the vault):
	// after an erasure they read as erased. Default aggregates.Plain. When
	// it is a Prefetcher, the keys of a round's events are read in one
	// lookup before their bodies are built.
	Decoders aggregates.Decoders
	// Metrics counts outcomes and lag. Optional.
	Metrics *Metrics
	// OnStale is called when a transaction finds the term stale
	// (readmodel.ErrStaleTerm): the leader steps down. Required.
	OnStale func(err error)
	// Log defaults to slog.Default().
	Log *slog.Logger
	// Rand draws the jitter, in [0, 1). Defaults to math/rand/v2.
	Rand func() float64
	// Tracer gives each attempt a span, child of the span of the fan-out
	// that queued the delivery (its row's trace_parent). Optional: without
	// it, no span.
	Tracer trace.Tracer
}

// Prefetcher is a Decoders that can read the keys of many events' sealed
// fields at once (the vault's PrefetchData), before they are decoded.
type Prefetcher interface {
	PrefetchData(data [][]byte)
}

// Dispatcher delivers the pending deliveries of one leadership term: one
// worker per endpoint with pending deliveries (see the package
// documentation). Build one per term.
type Dispatcher struct {
	cfg      DispatcherConfig
	log      *slog.Logger
	hold     time.Duration
	ctx      context.Context
	prefetch func(data [][]byte) // nil: the Decoders read each key themselves

	mu      sync.Mutex
	workers map[string]*worker // by endpoint
	closed  bool               // the term ended: no new worker
	wg      sync.WaitGroup

	// pending walks the endpoints with pending deliveries (the rescan),
	// queued those with deliveries an operator queued (a notification);
	// only Run uses them.
	pending, queued walk
}

// worker is the state of one endpoint's worker the dispatcher shares with
// it: its wake-ups, each buffered (one pending wake-up is enough).
type worker struct {
	// poke: the endpoint has new deliveries (from the fan-out, or a scan).
	poke chan struct{}
	// urgent: an operator queued one for this endpoint (a test ping, a
	// redelivery); it ends even the wait of a worker whose receiver keeps
	// failing, for what the operator queued only.
	urgent chan struct{}
}

// wake sends a wake-up on ch, unless one is pending already.
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// drain takes w's pending wake-ups: the round about to start serves them.
func (w *worker) drain() {
	for _, ch := range []chan struct{}{w.poke, w.urgent} {
		select {
		case <-ch:
		default:
		}
	}
}

// NewDispatcher returns a dispatcher whose workers run until ctx ends (the
// term's context, carrying its fence).
func NewDispatcher(ctx context.Context, cfg DispatcherConfig) (*Dispatcher, error) {
	if cfg.DB == nil || cfg.Sender == nil || cfg.Secrets == nil || cfg.OnStale == nil {
		return nil, errors.New("webhooks.NewDispatcher: DB, Sender, Secrets and OnStale are required")
	}
	if cfg.Schedule.Initial <= 0 || cfg.Schedule.Max <= 0 || cfg.Schedule.For <= 0 || cfg.Keep <= 0 {
		return nil, errors.New("webhooks.NewDispatcher: Schedule and Keep are required")
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	d := &Dispatcher{cfg: cfg, log: cmp.Or(cfg.Log, slog.Default()).With("component", "webhooks"),
		hold: cfg.Sender.timeout + holdMargin, ctx: ctx, workers: map[string]*worker{},
		pending: walk{sql: pendingSQL}, queued: walk{sql: queuedSQL}}
	// The vault reads a key it does not hold with a query of its own: a
	// round of claimBatch deliveries about as many customers would cost
	// as many round trips on the database every merchant shares.
	if p, ok := cfg.Decoders.(Prefetcher); ok {
		d.prefetch = p.PrefetchData
	}
	return d, nil
}

// WithDispatcher returns ctx in which the fan-out wakes d's workers after
// each commit (the fan-out of the same term).
func WithDispatcher(ctx context.Context, d *Dispatcher) context.Context {
	return withWake(ctx, func(ids []string) { d.poke(ids, false) })
}

// Run starts a worker for the endpoints with pending deliveries every
// rescanEvery (walkLimit endpoints a time, going on from where the last
// rescan stopped); whenever signal's channel closes (a delivery queued by
// the API), it wakes the workers of the endpoints with deliveries an
// operator queued and never tried, those only, as urgent (see work). It
// prunes the log, until the term's context ends; then it waits for the
// workers. signal returns the channel the next notification closes
// (projector.Notifier.Signal of DeliveriesTable).
func (d *Dispatcher) Run(signal func() <-chan struct{}) error {
	ctx := d.ctx
	defer func() {
		d.mu.Lock()
		d.closed = true // no worker starts after the Wait has begun
		d.mu.Unlock()
		d.wg.Wait()
	}()
	var lastPrune, lastRescan time.Time
	notified := false
	for {
		woken := signal()
		if notified {
			if err := d.look(ctx, &d.queued, true); err != nil && ctx.Err() == nil {
				d.log.Warn("look for queued webhook deliveries", "error", err)
			}
		}
		// Timed apart from the notifications, so that a stream of them
		// (pings) neither delays the rescan nor repeats it.
		if time.Since(lastRescan) >= rescanEvery {
			lastRescan = time.Now()
			if err := d.look(ctx, &d.pending, false); err != nil && ctx.Err() == nil {
				d.log.Warn("look for pending webhook deliveries", "error", err)
			}
		}
		if time.Since(lastPrune) >= pruneEvery {
			lastPrune = time.Now()
			d.prune(ctx)
		}
		t := time.NewTimer(max(rescanEvery-time.Since(lastRescan), 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-woken:
			notified = true
		case <-t.C:
			notified = false
		}
		t.Stop()
	}
}

// look pokes the workers of the next endpoints w walks.
func (d *Dispatcher) look(ctx context.Context, w *walk, urgent bool) error {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	ids, err := w.next(ctx, d.cfg.DB, walkLimit)
	if err != nil {
		return err
	}
	d.poke(ids, urgent)
	return nil
}

// walk goes through the distinct endpoints of a partial index on
// webhook_deliveries (endpoint_id, ...), a batch at a time, in id order,
// starting over after the last.
type walk struct {
	sql   string // walkSQL's
	after string // the last endpoint of the batch before; "" at the start
}

// next returns the next endpoints, at most limit.
func (w *walk) next(ctx context.Context, db *sql.DB, limit int) ([]string, error) {
	rows, err := db.QueryContext(ctx, w.sql, cmp.Or(w.after, "00000000-0000-0000-0000-000000000000"), limit)
	if err != nil {
		return nil, fmt.Errorf("walk webhook endpoints: %w", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("walk webhook endpoints: %w", err)
	}
	w.after = ""
	if len(ids) == limit { // more, maybe: the next batch goes on after the last
		w.after = ids[len(ids)-1]
	}
	return ids, nil
}

// walkSQL returns the distinct endpoints after $1 (at most $2, in order) of
// the rows that match where, through the partial index of the same
// predicate that leads with endpoint_id: a loose index scan, one probe per
// endpoint (each finds the first entry of the next endpoint), so that what
// it costs grows with the endpoints, never with their rows (DISTINCT would
// read every row).
func walkSQL(where string) string {
	next := `SELECT d.endpoint_id FROM webhook_deliveries d WHERE ` + where + ` AND d.endpoint_id > %s ORDER BY d.endpoint_id LIMIT 1`
	return `WITH RECURSIVE walk (endpoint_id, n) AS (
	SELECT f.endpoint_id, 1 FROM (` + fmt.Sprintf(next, "$1::uuid") + `) f
	UNION ALL
	SELECT e.endpoint_id, walk.n + 1 FROM walk CROSS JOIN LATERAL (` + fmt.Sprintf(next, "walk.endpoint_id") + `) e
	WHERE walk.n < $2
)
SELECT endpoint_id FROM walk`
}

// pendingSQL walks the endpoints with pending deliveries
// (webhook_deliveries_pending); queuedSQL those with deliveries an operator
// queued and that were never tried (webhook_deliveries_queued, migration
// 011).
var (
	pendingSQL = walkSQL(`d.status = 'pending'`)
	queuedSQL  = walkSQL(`d.status = 'pending' AND d.attempts = 0 AND (d.ping_payload IS NOT NULL OR d.redelivery_of IS NOT NULL)`)
)

// prune deletes finished deliveries older than Keep, and the deliveries of
// the endpoints deleted (webhook_endpoints_deleted, migration 033: an
// endpoint's DELETE leaves its log here rather than delete it in the
// request), a batch at a time. An endpoint deleted is forgotten once its
// log is gone and Keep has passed: a fan-out that read it before its
// deletion committed may queue deliveries for it after this pass.
func (d *Dispatcher) prune(ctx context.Context) {
	if !d.pruneBatches(ctx, "prune the webhook delivery log", `DELETE FROM webhook_deliveries WHERE id = ANY (ARRAY(
			SELECT id FROM webhook_deliveries WHERE status <> 'pending' AND completed_at < now() - $2 * interval '1 millisecond'
			ORDER BY completed_at LIMIT $1))`, d.cfg.Keep.Milliseconds()) {
		return
	}
	// Through each endpoint's entries of webhook_deliveries_log: the
	// deleted endpoints are few, their deliveries many.
	if !d.pruneBatches(ctx, "prune the deleted webhook endpoints' deliveries", `DELETE FROM webhook_deliveries WHERE id = ANY (ARRAY(
			SELECT l.id FROM webhook_endpoints_deleted x CROSS JOIN LATERAL (
				SELECT d.id FROM webhook_deliveries d WHERE d.endpoint_id = x.endpoint_id LIMIT $1) l
			LIMIT $1))`) {
		return
	}
	_, err := d.inTx(ctx, func(ctx context.Context, tx *sql.Tx) (int64, error) {
		_, err := tx.ExecContext(ctx, `DELETE FROM webhook_endpoints_deleted x
			WHERE x.deleted_at < now() - $1 * interval '1 millisecond'
			  AND NOT EXISTS (SELECT FROM webhook_deliveries d WHERE d.endpoint_id = x.endpoint_id)`, d.cfg.Keep.Milliseconds())
		return 0, err
	})
	if err != nil && ctx.Err() == nil && !errors.Is(err, readmodel.ErrStaleTerm) {
		d.log.Warn("forget the deleted webhook endpoints", "error", err)
	}
}

// pruneBatches runs the pruning statement del (its arguments: the batch,
// then args) until a batch comes back short; false when it failed (then
// the pruning stops until its next turn).
func (d *Dispatcher) pruneBatches(ctx context.Context, what, del string, args ...any) bool {
	for ctx.Err() == nil {
		n, err := d.inTx(ctx, func(ctx context.Context, tx *sql.Tx) (int64, error) {
			res, err := tx.ExecContext(ctx, del, append([]any{pruneBatch}, args...)...)
			if err != nil {
				return 0, err
			}
			return res.RowsAffected()
		})
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, readmodel.ErrStaleTerm) {
				d.log.Warn(what, "error", err)
			}
			return false
		}
		if n < pruneBatch {
			return true
		}
	}
	return false
}

// poke wakes the workers of the endpoints, starting those not running.
func (d *Dispatcher) poke(endpointIDs []string, urgent bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.ctx.Err() != nil {
		return
	}
	for _, id := range endpointIDs {
		if w, ok := d.workers[id]; ok {
			wake(w.poke)
			if urgent {
				wake(w.urgent)
			}
			continue
		}
		w := &worker{poke: make(chan struct{}, 1), urgent: make(chan struct{}, 1)}
		d.workers[id] = w
		d.wg.Go(func() { d.work(id, w) })
	}
}

// done removes a worker that found nothing pending, unless it was woken
// meanwhile (then it goes on).
func (d *Dispatcher) done(id string, w *worker) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if (len(w.poke) > 0 || len(w.urgent) > 0) && d.ctx.Err() == nil {
		return false
	}
	delete(d.workers, id)
	return true
}

// claim is one delivery a round claimed, with what its attempt needs.
type claim struct {
	id, eventID    string
	aggregate      string
	body           []byte
	bodyErr        error   // no body: not sent (notSent)
	stored         *stored // the event, until bodies builds its body; nil for a ping or a missing event
	ping, again    bool
	attempts       int
	first, claimed time.Time // first attempt, this attempt (the database's clock)
	sent           time.Time // this process's clock just before the claiming round was sent (claimed is later)
	since          time.Time // what the lag counts from: the event's time, or the queueing of a ping or redelivery
	traceParent    string    // the fan-out's span ("" when none)
}

// stored is a claimed event as the events table holds it.
type stored struct {
	env      event.Envelope
	position int64
	// skipped: the fan-out was given it as skipped (an operator skipped it
	// in the fan-out's projection), and queued it as <aggregate>.event_skipped.
	skipped bool
}

// skippedType reports whether a delivery was queued as a skipped event:
// its public type's data is publicevent.SkippedData.
func skippedType(publicType string) bool {
	d, _ := publicevent.DataOf(publicType)
	_, ok := d.(publicevent.SkippedData)
	return ok
}

// result is the outcome of a claimed delivery, to record.
type result struct {
	id        string
	aggregate string // of the delivery (health)
	status    string // webhook.Pending (retry), Succeeded or Failed
	wait      time.Duration
	code      int
	latency   time.Duration
	err       string
	// disable, when set, disables the endpoint with this reason, if it
	// still has url: the URL the attempt was sent to. A receiver's answer
	// is about that URL, whatever else changed meanwhile (a rotated secret,
	// a new description or event types); it says nothing of a new URL,
	// whose deliveries go on.
	disable string
	url     string
	// gaveUp: the delivery's retries ran out (not a 410). It disables the
	// endpoint only when no delivery to it succeeded since first, its
	// first attempt: a receiver that took other events meanwhile is up,
	// and refuses this aggregate's alone (a body it cannot take). Then
	// the delivery fails with the aggregate's pending ones behind it, and
	// the endpoint goes on.
	gaveUp bool
	first  time.Time
	// release puts the claim back untried (the term ended before the send
	// ended, or the send could not end before the claim's hold).
	release bool
	// ping: the attempt was a test ping's (it says nothing of whether the
	// endpoint is failing).
	ping bool
	// notSent: nothing was sent, the body could not be built for a passing
	// cause (notSent); it says nothing of the receiver either.
	notSent bool
}

// target is what a round reads of its endpoint.
type target struct {
	found, enabled bool
	endpoint       webhook.Endpoint
	// disabled is the reason this round disabled the endpoint with, if it
	// did: its pending deliveries fail naming it.
	disabled string
}

// work is one endpoint's worker: rounds until nothing is pending.
func (d *Dispatcher) work(id string, w *worker) {
	ctx := d.ctx
	log := d.log.With("endpoint_id", id)
	var results []result
	// h.failing: the receiver looks down (health.after). Then the round
	// right after the failures claims only retries that are due (and what
	// an operator queued), and the worker waits for the next retry before
	// it claims deliveries never tried: a receiver that is down gets the
	// new events in waves, at its retry times, not one request per event
	// as they come, nor one wave per wake-up.
	var h health
	fresh := true
	retry := roundBackOff()
	for {
		w.drain()
		start := time.Now() // before the claim: its hold ends after start + hold
		claims, tgt, nextIn, err := d.round(ctx, id, results, fresh)
		if err != nil {
			if errors.Is(err, readmodel.ErrStaleTerm) {
				d.cfg.OnStale(err)
			}
			if ctx.Err() != nil || errors.Is(err, readmodel.ErrStaleTerm) {
				d.flush(id, results)
				d.done(id, w)
				return
			}
			wait := retry.NextBackOff()
			log.Warn("webhook delivery round failed; trying again", "error", err, "in", wait)
			if !sleep(ctx, wait) {
				d.flush(id, results)
				d.done(id, w)
				return
			}
			continue // with the same results
		}
		retry.Reset()
		results = nil
		if len(claims) > 0 {
			results = d.send(ctx, tgt.endpoint, claims, start)
			h = h.after(results)
			fresh = !h.failing
			continue
		}
		if nextIn < 0 { // nothing pending
			if d.done(id, w) {
				return
			}
			continue
		}
		// Wait for the next retry. A poke (new deliveries) ends the wait,
		// unless the endpoint is failing: then new deliveries wait for its
		// next retry too (and its queue is not scanned for every event).
		// What an operator queued for this endpoint ends it anyway, but
		// the round it starts claims only that while the endpoint is
		// failing: nothing else goes out before the next retry.
		t := time.NewTimer(max(nextIn, time.Millisecond))
		poked := w.poke
		if h.failing {
			poked = nil
		}
		fresh = true // a retry wave, or new deliveries
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-poked:
		case <-w.urgent:
			fresh = !h.failing
		}
		t.Stop()
		if ctx.Err() != nil {
			d.done(id, w)
			return
		}
	}
}

// health is what an endpoint's worker makes of its receiver from the
// attempts since the last one that succeeded.
type health struct {
	// failing: the receiver looks down. One of those attempts got no HTTP
	// answer (none in time, a refused or broken connection), or the
	// receiver refused (any status but 2xx) the events of two aggregates
	// or more. A receiver that answers, but refuses the events of one
	// aggregate only (a body it cannot take), is not failing: the other
	// aggregates' events go on as they come (they do not wait for that
	// aggregate's next retry).
	failing bool
	// refused is the aggregate whose attempts the receiver refused, while
	// it refused one aggregate's only.
	refused string
}

// after is h after a round's results: a success makes the receiver
// healthy (whatever else the round failed); a round of test pings only
// (or of releases, or of deliveries whose body could not be built) leaves
// it as it was.
func (h health) after(results []result) health {
	tried := false
	for _, r := range results {
		if r.release || r.ping || r.notSent {
			continue
		}
		if r.status == webhook.Succeeded {
			return health{}
		}
		tried = true
	}
	if !tried {
		return h
	}
	for _, r := range results {
		switch {
		case r.release || r.ping || r.notSent:
		case r.code == 0: // no HTTP answer
			h.failing = true
		case h.refused == "":
			h.refused = r.aggregate
		case h.refused != r.aggregate:
			h.failing = true
		}
	}
	return h
}

// roundBackOff paces an endpoint worker's rounds after a failed one (the
// database gone, a failover): from a second, doubling, up to half a minute,
// spread a little so that the workers of many endpoints do not all try
// again at once.
func roundBackOff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.Multiplier, b.MaxInterval, b.RandomizationFactor = time.Second, 2, 30*time.Second, 0.2
	b.MaxElapsedTime = 0 // for as long as the term lasts
	b.Reset()
	return b
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// inTx runs fn in one transaction whose BEGIN checks the term.
func (d *Dispatcher) inTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) (int64, error)) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	ctx, err := readmodel.Fenced(ctx, d.cfg.DB)
	if err != nil {
		return 0, err
	}
	tx, err := d.cfg.DB.BeginTx(ctx, nil)
	if err != nil {
		return 0, readmodel.StaleTerm(err)
	}
	n, err := fn(ctx, tx)
	if err != nil {
		return 0, readmodel.StaleTerm(errors.Join(err, ignoreDone(tx.Rollback())))
	}
	return n, readmodel.StaleTerm(tx.Commit())
}

// customPlans has a round's statements planned for the table as it is at
// each execution. A prepared statement's cached generic plan is kept until
// the table is analysed again: one made while the table was young (a new
// installation's first deliveries) scanned the whole table for a round's
// few rows once it had grown, in every round, until autovacuum came by.
// Planning the round's few statements costs less than one such scan.
const customPlans = "SET LOCAL plan_cache_mode = force_custom_plan"

// round is one transaction of a worker, sent as one pgx batch (one round
// trip): BEGIN with the fencing check, the results of the round before
// (disabling the endpoint when one says so), the endpoint, the claim of
// the deliveries whose turn has come (those never tried only when fresh,
// or when an operator queued them), COMMIT. With nothing claimed, nextIn is
// how long until the next one is due, counting those never tried only when
// fresh, queued by an operator, or when there is nothing else (negative:
// nothing is pending); a disabled endpoint's pending deliveries fail then.
func (d *Dispatcher) round(ctx context.Context, endpointID string, results []result, fresh bool) (claims []claim, tgt target, nextIn time.Duration, err error) {
	parent := ctx // the failing of a disabled endpoint's backlog: a step per batch
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	fence, fenced := readmodel.FenceSQL(ctx)
	record := recordStatements(endpointID, results)
	err = database.WithConn(ctx, d.cfg.DB, func(conn *pgx.Conn) error {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(customPlans)
		if fenced {
			b.Queue(fence)
		}
		for _, st := range record {
			b.Queue(st.sql, st.args...)
		}
		b.Queue(`SELECT `+endpointColumns+` FROM webhook_endpoints WHERE id = $1`, endpointID)
		b.Queue(claimSQL, endpointID, claimBatch, d.hold.Milliseconds(), fresh)
		b.Queue("COMMIT")
		sent := time.Now()
		br := conn.SendBatch(ctx, b)
		err := d.readRound(br, endpointID, fenced, record, &tgt, &claims)
		for i := range claims {
			claims[i].sent = sent
		}
		return errors.Join(err, br.Close())
	})
	err = readmodel.StaleTerm(err)
	if err == nil && len(claims) > 0 {
		// Once the round's transaction has ended and its connection is back
		// in the pool: the bodies may wait for the vault's lookup.
		d.bodies(claims)
	}
	if err != nil || len(claims) > 0 {
		return claims, tgt, 0, err
	}
	switch {
	case !tgt.found: // deleted: its deliveries wait for the pruning
		return nil, tgt, -1, nil
	case !tgt.enabled:
		why := "the endpoint is disabled"
		if tgt.disabled != "" { // by this round
			why = "the endpoint was disabled: " + tgt.disabled
		}
		return nil, tgt, -1, d.failPending(parent, endpointID, why)
	}
	var seconds sql.NullFloat64
	err = d.cfg.DB.QueryRowContext(ctx, `SELECT EXTRACT(EPOCH FROM coalesce(
			min(next_attempt_at) FILTER (WHERE attempts > 0 OR $2 OR queued), min(next_attempt_at)) - now())::float8 FROM (
		SELECT DISTINCT ON (aggregate_id) next_attempt_at, attempts,
			ping_payload IS NOT NULL OR redelivery_of IS NOT NULL AS queued FROM webhook_deliveries
		WHERE endpoint_id = $1 AND status = 'pending' ORDER BY aggregate_id, aggregate_version, seq) heads`, endpointID, fresh).Scan(&seconds)
	if err != nil {
		return nil, tgt, 0, fmt.Errorf("next webhook delivery: %w", err)
	}
	if !seconds.Valid {
		return nil, tgt, -1, nil
	}
	return nil, tgt, max(time.Duration(seconds.Float64*float64(time.Second)), 0), nil
}

// readRound reads the answers of round's batch, in its order.
func (d *Dispatcher) readRound(br pgx.BatchResults, endpointID string, fenced bool, record []statement, tgt *target, claims *[]claim) error {
	for range 2 { // BEGIN, customPlans
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	if fenced {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	disabled := ""
	for _, st := range record {
		tag, err := br.Exec()
		if err != nil {
			return fmt.Errorf("record webhook deliveries: %w", err)
		}
		if d.noteDisabled(endpointID, st, tag.RowsAffected()) {
			disabled = st.disables
		}
	}
	e, err := scanEndpoint(br.QueryRow(), d.cfg.Secrets)
	switch {
	case errors.Is(err, apperr.ErrNotFound):
	case err != nil:
		return fmt.Errorf("read webhook endpoint: %w", err)
	default:
		*tgt = target{found: true, enabled: e.Enabled, endpoint: e, disabled: disabled}
	}
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("claim webhook deliveries: %w", err)
	}
	if *claims, err = readClaims(rows); err != nil {
		return fmt.Errorf("claim webhook deliveries: %w", err)
	}
	_, err = br.Exec() // COMMIT
	return err
}

// statement is one statement of a round, with its arguments.
type statement struct {
	sql  string
	args []any
	// disables is the reason of an endpoint's disabling, when this
	// statement disables it.
	disables string
}

// failPending gives up the pending deliveries of the endpoint, once it is
// disabled (a disable that found the endpoint's URL changed since did not),
// failBatch a transaction until none is left. They are not failed in the
// round that disables the endpoint: by then WEBHOOK_RETRY_FOR of the
// merchant's events may be pending behind the receiver that is down, more
// than one transaction can lock and update within stepTimeout, and a
// round that cannot end is rolled back, the endpoint not disabled, and
// tried again for ever.
func (d *Dispatcher) failPending(ctx context.Context, endpointID, why string) error {
	for ctx.Err() == nil {
		n, err := d.inTx(ctx, func(ctx context.Context, tx *sql.Tx) (int64, error) {
			res, err := tx.ExecContext(ctx, failPendingSQL, endpointID, why, failBatch)
			if err != nil {
				return 0, err
			}
			return res.RowsAffected()
		})
		if err != nil {
			return fmt.Errorf("fail the pending webhook deliveries of a disabled endpoint: %w", err)
		}
		if n < failBatch {
			return nil
		}
	}
	return ctx.Err()
}

// failPendingSQL fails a batch of the endpoint's pending deliveries ($3 at
// most, the first queued: the pending index's order), if it is disabled.
//
// The batch is locked in id order, then updated, as the erasure's scrub of
// the receivers' error texts locks them (pubsub's scrubDeliveryErrors): a
// pending delivery tried already holds its receiver's words, so an erasure
// of the customer of its order matches it too, and an UPDATE locks rows in
// the order its scan meets them (insertion order, by
// webhook_deliveries_pending or the heap): each could hold a row the other
// waits for (a deadlock, and the erasure or the worker fails). Each takes
// its rows in ascending id order, so neither waits for the other while
// holding a row the other waits for. The batch is chosen without locks,
// by the pending index: ordered by id, it would sort the endpoint's whole
// backlog for every batch.
const failPendingSQL = `WITH batch AS (
		SELECT id FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'pending' ORDER BY seq LIMIT $3
	), named AS (
		SELECT id FROM webhook_deliveries
		WHERE id = ANY (ARRAY(SELECT id FROM batch)) AND status = 'pending'
		  AND NOT (SELECT enabled FROM webhook_endpoints WHERE id = $1)
		ORDER BY id FOR UPDATE)
	UPDATE webhook_deliveries d SET status = 'failed', completed_at = now(),
		error = CASE WHEN d.error = '' THEN '` + webhook.NotSent + `' || $2 ELSE d.error || '; then: ' || $2 END
	FROM named WHERE d.id = named.id`

// claimSQL claims the due deliveries of an enabled endpoint: pending ones
// whose time has come and that are the first pending one of their
// aggregate (by version), at most $2, oldest first; those never tried yet
// only when $4 or when an operator queued them (a test ping, a
// redelivery). It counts the attempt and moves the
// next one past the send's timeout ($3 ms, the hold), and reads each event
// as stored. The pending rows are read in insertion order
// (webhook_deliveries_pending) and each is checked to be the first of its
// aggregate (webhook_deliveries_queue; a scalar subquery, so that the check
// is one index probe per row whatever the planner estimates), so a round
// costs about as much however long the endpoint's queue is, as long as it
// is moving.
// The rows are updated and the events read by key (= ANY, LATERAL): joined,
// the planner may scan the whole table for a few rows. The LATERAL
// subquery's LIMIT 1 (event ids are unique) keeps it from being flattened
// into such a join: flattened, with statistics that had not yet seen the
// events table grow, the claim hashed the whole table in every round.
const claimSQL = `WITH due AS (
	SELECT d.id FROM webhook_deliveries d
	WHERE d.endpoint_id = $1 AND d.status = 'pending' AND d.next_attempt_at <= now()
	  AND (d.attempts > 0 OR $4 OR d.ping_payload IS NOT NULL OR d.redelivery_of IS NOT NULL)
	  AND EXISTS (SELECT FROM webhook_endpoints w WHERE w.id = $1 AND w.enabled)
	  AND d.id = (SELECT e.id FROM webhook_deliveries e
	              WHERE e.endpoint_id = $1 AND e.aggregate_id = d.aggregate_id AND e.status = 'pending'
	              ORDER BY e.aggregate_version, e.seq LIMIT 1)
	ORDER BY d.seq LIMIT $2
), claimed AS (
	UPDATE webhook_deliveries d
	SET attempts = d.attempts + 1, first_attempt_at = coalesce(d.first_attempt_at, now()),
	    last_attempt_at = now(), next_attempt_at = now() + $3 * interval '1 millisecond'
	WHERE d.id = ANY (ARRAY(SELECT id FROM due))
	RETURNING d.id, d.event_id, d.event_type, d.aggregate_id, d.ping_payload, d.redelivery_of IS NOT NULL AS again, d.attempts,
	          d.first_attempt_at, d.last_attempt_at, d.created_at, d.trace_parent
)
SELECT c.id, c.event_id, c.event_type, c.aggregate_id::text, c.ping_payload, c.again, c.attempts, c.first_attempt_at, c.last_attempt_at, c.created_at,
       coalesce(c.trace_parent, ''),
       e.position, e.stream_type, e.stream_id, e.version, e.merchant_id, e.type, e.data, e.occurred_at,
       e.correlation_id, e.causation_id, e.actor
FROM claimed c LEFT JOIN LATERAL (SELECT * FROM events WHERE event_id = c.event_id AND c.ping_payload IS NULL LIMIT 1) e ON true`

// readClaims reads what claimSQL returns: the events as stored, whose
// bodies are built once they are all read (bodies).
func readClaims(rows pgx.Rows) ([]claim, error) {
	defer rows.Close()
	var out []claim
	for rows.Next() {
		var c claim
		var ping []byte
		var eventType string
		var created time.Time
		var position sql.NullInt64
		var version sql.NullInt32
		var streamType, streamID, merchantID, typ, correlationID, causationID, actor sql.NullString
		var data []byte
		var occurred sql.NullTime
		if err := rows.Scan(&c.id, &c.eventID, &eventType, &c.aggregate, &ping, &c.again, &c.attempts, &c.first, &c.claimed, &created, &c.traceParent,
			&position, &streamType, &streamID, &version, &merchantID, &typ, &data, &occurred,
			&correlationID, &causationID, &actor); err != nil {
			return nil, err
		}
		c.since = created
		if ping != nil {
			c.ping, c.body = true, ping
		} else if !position.Valid {
			c.bodyErr = fmt.Errorf("event %s is not in the event store", c.eventID)
		} else {
			env := event.Envelope{ID: c.eventID, Type: typ.String, StreamType: streamType.String, StreamID: streamID.String,
				Version: int(version.Int32), MerchantID: merchantID.String, OccurredAt: occurred.Time,
				CorrelationID: correlationID.String, CausationID: causationID.String, Actor: actor.String, Data: data}
			c.stored = &stored{env: env, position: position.Int64, skipped: skippedType(eventType)}
			if !c.again {
				c.since = occurred.Time
			}
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// bodies builds the bodies of the claimed events: their data keys first,
// in one lookup when the Decoders can (prefetch). A key the lookup could
// not read is read (or its failure reported, as bodyErr) by the decoder
// itself, event by event.
func (d *Dispatcher) bodies(claims []claim) {
	if d.prefetch != nil {
		data := make([][]byte, 0, len(claims))
		for _, c := range claims {
			if c.stored != nil {
				data = append(data, c.stored.env.Data)
			}
		}
		d.prefetch(data)
	}
	for i := range claims {
		if c := &claims[i]; c.stored != nil {
			c.body, c.bodyErr = body(d.cfg.Decoders, *c.stored)
			c.stored = nil
		}
	}
}

// body is the public form of a stored event, as delivered: the same bytes
// at every attempt, until its subject is erased (then its personal fields
// are null, and named erased). A skipped event goes out as the fan-out
// queued it, and as the event feed and the relay give it:
// <aggregate>.event_skipped, naming its stored type only. It is not
// decoded: an operator skips what does not decode, and a skipped event's
// payload (its personal fields among it) is not sent on.
func body(dec aggregates.Decoders, s stored) ([]byte, error) {
	env := s.env
	facts, ok := aggregates.OutboundByType(env.StreamType)
	if !ok {
		return nil, fmt.Errorf("event %s: unknown stream type %q", env.ID, env.StreamType)
	}
	rec := event.Recorded{Envelope: env}
	if s.skipped {
		rec = event.Skip(rec)
	} else {
		e, err := aggregates.Or(dec).Decoder(facts)(env.Type, env.Data)
		if err != nil {
			return nil, fmt.Errorf("event %s: %w", env.ID, err)
		}
		rec.Event = e
	}
	pub, err := publicevent.From(publicevent.Stored{Recorded: rec, Position: s.position})
	if err != nil {
		return nil, err
	}
	return publicevent.Marshal(pub)
}

// send makes the claimed deliveries, at most inFlightPerEndpoint at once,
// and judges each. start is a time before the claim: a send that could
// end after the claim's hold does not start, and its claim is put back
// (the next round claims it again, with a hold of its own). A round claims
// up to claimBatch, and a slow receiver's sends take the timeout each, so
// its later sends would start timeouts after the claim (or a paused
// process would resume after the hold): by then the next leader may have
// claimed them, and both would send. The hold stays one timeout long, so
// that the next leader takes over a dead one's claims soon.
func (d *Dispatcher) send(ctx context.Context, e webhook.Endpoint, claims []claim, start time.Time) []result {
	out := make([]result, len(claims))
	slots := make(chan struct{}, inFlightPerEndpoint)
	// Half the margin is left for the round's own transaction and the
	// clocks: start is taken before it, the hold counted from the
	// database's now().
	last := start.Add(d.hold - holdMargin/2 - d.cfg.Sender.timeout)
	var wg sync.WaitGroup
	for i, c := range claims {
		if c.bodyErr != nil {
			out[i] = d.notSent(c, e)
			continue
		}
		slots <- struct{}{}
		if time.Now().After(last) {
			<-slots
			out[i] = result{id: c.id, release: true}
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			ctx, span := d.startSend(ctx, e, c)
			o := d.cfg.Sender.Send(ctx, e.URL, e.Secrets(d.cfg.Sender.now()), c.eventID, c.body)
			if !o.OK() && ctx.Err() != nil {
				out[i] = result{id: c.id, release: true}
				endSend(span, o, out[i])
				return
			}
			out[i] = d.judge(c, o)
			out[i].url = e.URL
			endSend(span, o, out[i])
		})
	}
	wg.Wait()
	return out
}

// notSent judges a claim whose body could not be built. A passing cause
// (the vault could not read a data key: a failover, a full pool, a
// timeout) is a failed attempt on the retry schedule, as if the receiver
// had not answered, and gives up (disabling the endpoint) only when the
// schedule runs out; it says nothing of the receiver, so it does not make
// the endpoint failing. So is an event type this release does not know
// (below). Any other cause (the event is missing, its stream type unknown,
// its data key missing, its box tampered with) will not pass: the delivery
// fails at once.
func (d *Dispatcher) notSent(c claim, e webhook.Endpoint) result {
	why := webhook.NotSent + c.bodyErr.Error()
	// An event type this release does not know is most likely a newer
	// release's, queued by its fan-out during a rolling upgrade: tried
	// again on the retry schedule, it goes out once a release that knows
	// it leads; failed now, nothing but an operator would send it.
	if !temporary(c.bodyErr) && !errors.As(c.bodyErr, new(*event.UnknownTypeError)) {
		d.cfg.Metrics.outcome("failed")
		return result{id: c.id, aggregate: c.aggregate, status: webhook.Failed, err: why, ping: c.ping}
	}
	r := d.judge(c, Outcome{Err: why})
	r.url, r.notSent = e.URL, true
	return r
}

// temporary reports an error that says it is worth a retry (the vault's
// failed lookup of a data key).
func temporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// startSend starts the span of an attempt of c to e, when the dispatcher
// has a tracer: a child of the fan-out's span that queued c (so of the
// write's trace), or a root for a delivery queued without one.
func (d *Dispatcher) startSend(ctx context.Context, e webhook.Endpoint, c claim) (context.Context, trace.Span) {
	if d.cfg.Tracer == nil {
		return ctx, noop.Span{}
	}
	return d.cfg.Tracer.Start(tracing.FromParent(ctx, c.traceParent), "hearth.webhook.deliver",
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("hearth.endpoint_id", e.ID), attribute.String("hearth.event_id", c.eventID),
			attribute.String("hearth.delivery_id", c.id), attribute.Int("hearth.attempt", c.attempts), attribute.Bool("hearth.ping", c.ping)))
}

// endSend records an attempt's outcome on its span and ends it.
func endSend(span trace.Span, o Outcome, r result) {
	if span.IsRecording() {
		outcome := r.status
		if r.release {
			outcome = "released"
		}
		span.SetAttributes(attribute.Int("http.response.status_code", o.Status), attribute.String("hearth.outcome", outcome))
		if !o.OK() {
			span.SetStatus(codes.Error, o.Brief())
		}
	}
	span.End()
}

// judge turns an attempt's outcome into what to record.
func (d *Dispatcher) judge(c claim, o Outcome) result {
	r := result{id: c.id, aggregate: c.aggregate, code: o.Status, latency: o.Latency, err: o.Err, ping: c.ping}
	switch {
	case o.OK():
		r.status = webhook.Succeeded
		d.cfg.Metrics.delivered(time.Since(c.since))
		return r
	case c.ping: // tried once, and never disables its endpoint, not even by a 410
		r.status = webhook.Failed
	case o.Gone():
		r.status, r.disable = webhook.Failed, "the receiver answered 410 Gone"
	default:
		// When the attempt failed, on the database's clock (that of
		// first): at least as late as it was, so that no retry is due
		// after For. The send may have waited for a free slot of the
		// endpoint, so the claim's time plus the request's latency is not.
		at := c.claimed.Add(time.Since(c.sent))
		next, ok := d.cfg.Schedule.Next(c.first, at, c.attempts, d.cfg.Rand())
		if ok {
			r.status, r.wait = webhook.Pending, next.Sub(at)
			d.cfg.Metrics.outcome("retrying")
			return r
		}
		r.status, r.gaveUp, r.first = webhook.Failed, true, c.first
		// The receiver's words stay in the delivery's own row (see Brief).
		r.disable = fmt.Sprintf("delivery %s failed for %s (%d attempts since %s; WEBHOOK_RETRY_FOR is %s); its last error: %s",
			c.id, at.Sub(c.first).Round(time.Second), c.attempts, c.first.UTC().Format(time.RFC3339), d.cfg.Schedule.For, o.Brief())
	}
	d.cfg.Metrics.outcome("failed")
	return r
}

// recordSQL records results, from one array per column.
//
// Both statements find their rows by key and only then check that they
// are still pending, against (SELECT 'pending') rather than the literal:
// with the literal the planner may read the rows through the partial
// indexes of pending rows (their predicate is the same condition) and
// test every pending row against the ids. The table's statistics are
// easily stale about pending rows (autovacuum re-analyses it after a tenth
// of it changed, and most of it is finished deliveries kept for
// WEBHOOK_DELIVERY_KEEP), so a backlog that built up since reads as a few
// rows, and each round of its drain then read the whole backlog: a drain
// slowed with the square of its length. TestRecordingReadsTheRowsByKey.
//
// The receiver's words about an aggregate of a subject erased meanwhile
// are not kept: the attempt's body was built before the erasure, and a
// receiver that refuses a body often quotes it (the erasure replaced the
// texts already there).
const recordSQL = `UPDATE webhook_deliveries d SET status = r.status,
	next_attempt_at = CASE WHEN r.status = 'pending' THEN now() + r.wait_ms * interval '1 millisecond' ELSE d.next_attempt_at END,
	response_status = nullif(r.code, 0), latency_ms = r.latency_ms,
	error = CASE WHEN r.err = '' THEN r.err
		WHEN EXISTS (SELECT 1 FROM events e JOIN erased_subjects s ON s.subject_id = e.subject_id
			WHERE e.stream_id = d.aggregate_id AND e.subject_id IS NOT NULL) THEN '` + webhook.ErasedError + `'
		ELSE r.err END,
	completed_at = CASE WHEN r.status = 'pending' THEN NULL ELSE now() END
FROM unnest($1::text[]::uuid[], $2::text[], $3::bigint[], $4::int[], $5::float8[], $6::text[])
     AS r(id, status, wait_ms, code, latency_ms, err)
WHERE d.id = ANY ($1::text[]::uuid[]) AND d.id = r.id AND d.status = (SELECT 'pending')`

// releaseSQL puts claims back, untried: due at once, the attempt uncounted.
// By key, as recordSQL.
const releaseSQL = `UPDATE webhook_deliveries SET attempts = attempts - 1, next_attempt_at = now(),
	first_attempt_at = CASE WHEN attempts = 1 THEN NULL ELSE first_attempt_at END
WHERE id = ANY ($1::text[]::uuid[]) AND status = (SELECT 'pending') AND attempts > 0`

// recordStatements store results, and disable the endpoint when one says
// so (its pending deliveries fail after the round's transaction:
// failPending). A give-up (result.gaveUp) disables it only when no
// delivery to it succeeded since the given-up delivery's first attempt
// (the latest such attempt when a round gave up several); otherwise the
// pending deliveries of the given-up aggregates fail in the round
// (failAggregates), and nothing else.
func recordStatements(endpointID string, results []result) []statement {
	var ids, statuses, errs, released, gaveUp []string
	var waits []int64
	var codes []int32
	var latencies []float64
	disable, url, gone := "", "", false
	var since time.Time // of the give-up that decides, when no 410 does
	for _, r := range results {
		if r.release {
			released = append(released, r.id)
			continue
		}
		ids, statuses, errs = append(ids, r.id), append(statuses, r.status), append(errs, storable(r.err))
		waits, codes = append(waits, r.wait.Milliseconds()), append(codes, int32(r.code))
		latencies = append(latencies, float64(r.latency.Microseconds())/1000)
		switch {
		case r.disable == "" || gone:
		case !r.gaveUp: // a 410: disables whatever else the round did
			disable, url, gone = storable(r.disable), r.url, true
		case disable == "" || r.first.After(since):
			disable, url, since = storable(r.disable), r.url, r.first
		}
		if r.gaveUp {
			gaveUp = append(gaveUp, r.aggregate)
		}
	}
	var unlessSucceededSince any // NULL: disable whatever succeeded
	if !gone {
		unlessSucceededSince = since
	}
	var out []statement
	if len(gaveUp) > 0 {
		out = append(out, lockGivenUp(endpointID, append(slices.Clone(ids), released...), gaveUp))
	}
	if len(ids) > 0 {
		out = append(out, statement{sql: recordSQL, args: []any{ids, statuses, waits, codes, latencies, errs}})
	}
	if len(released) > 0 {
		out = append(out, statement{sql: releaseSQL, args: []any{released}})
	}
	if disable != "" {
		// A success since the give-up's first attempt is read after
		// recordSQL: one of this very round counts.
		out = append(out, statement{sql: `UPDATE webhook_endpoints SET enabled = false, disabled_reason = $2,
			disabled_at = now(), version = version + 1, updated_at = now() WHERE id = $1 AND enabled AND url = $3
			AND ($4::timestamptz IS NULL OR NOT EXISTS (SELECT FROM webhook_deliveries s
				WHERE s.endpoint_id = $1 AND s.status = 'succeeded' AND s.ping_payload IS NULL AND s.completed_at >= $4))`,
			args: []any{endpointID, disable, url, unlessSucceededSince}, disables: disable})
	}
	if len(gaveUp) > 0 {
		out = append(out, failAggregates(endpointID, gaveUp, url))
	}
	return out
}

// lockGivenUp locks, in id order, the round's deliveries and the pending
// deliveries of the aggregates it gave up, which recordSQL and
// failAggregates then write: every row the round writes is taken in id
// order, as an erasure takes them, so the two cannot deadlock. Only the
// given-up aggregates' rows, not the endpoint's whole backlog.
func lockGivenUp(endpointID string, round, aggregates []string) statement {
	return statement{sql: `SELECT 1 FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'pending'
		AND (id = ANY ($2::text[]::uuid[]) OR aggregate_id = ANY ($3::text[]::uuid[])) ORDER BY id FOR UPDATE`,
		args: []any{endpointID, round, aggregates}}
}

// failAggregates gives up the pending deliveries of the aggregates whose
// delivery was given up, when the endpoint stays enabled on url (the
// disabling, just before, found a delivery that succeeded since): they
// would go out past the lost event. Locked in id order, as failPending's
// (lockGivenUp has locked them already, before recordSQL). A disabled
// endpoint's fail with failPending's note instead, and an endpoint whose
// URL changed since the attempt sends them to the new URL.
func failAggregates(endpointID string, aggregates []string, url string) statement {
	return statement{sql: `WITH named AS (
			SELECT id FROM webhook_deliveries
			WHERE endpoint_id = $1 AND aggregate_id = ANY ($2::text[]::uuid[]) AND status = 'pending'
			  AND (SELECT enabled AND url = $3 FROM webhook_endpoints WHERE id = $1)
			ORDER BY id FOR UPDATE)
		UPDATE webhook_deliveries d SET status = 'failed', completed_at = now(),
			error = CASE WHEN d.error = '' THEN '` + webhook.NotSent + `' || $4 ELSE d.error || '; then: ' || $4 END
		FROM named WHERE d.id = named.id`,
		args: []any{endpointID, aggregates, url, "an earlier event of its aggregate was given up (its retries ran out); redeliver them in order"}}
}

// noteDisabled logs and counts an endpoint that st disabled, and reports
// whether it did.
func (d *Dispatcher) noteDisabled(endpointID string, st statement, rows int64) bool {
	if st.disables != "" && rows > 0 {
		d.log.Warn("webhook endpoint disabled", "endpoint_id", endpointID, "reason", st.disables)
		d.cfg.Metrics.disabledEndpoint()
		return true
	}
	return false
}

// flush records, in a transaction of its own, the results a worker could
// not record in a round because its term ended: what it sent, and what it
// claimed but did not send (put back, so that the next leader sends it at
// once instead of after the hold). It still checks the term: once a new
// term has begun, nothing is recorded, and the claims wait for the hold
// (their sends may be sent again: at least once).
func (d *Dispatcher) flush(endpointID string, results []result) {
	if len(results) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.ctx), 2*time.Second)
	defer cancel()
	if _, err := d.inTx(ctx, func(ctx context.Context, tx *sql.Tx) (int64, error) {
		for _, st := range recordStatements(endpointID, results) {
			res, err := tx.ExecContext(ctx, st.sql, st.args...)
			if err != nil {
				return 0, err
			}
			n, _ := res.RowsAffected()
			d.noteDisabled(endpointID, st, n)
		}
		return 0, nil
	}); err != nil {
		d.log.Debug("webhook delivery results not recorded at the end of the term; the next leader tries them again after the hold",
			"endpoint_id", endpointID, "error", err)
	}
}
