package webhooks

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"hearth/adapters/pubsub/projector"
	"hearth/adapters/readmodel"
	"hearth/app/publicevent"
	"hearth/domain/event"
	"hearth/internal/aggregates"
	"hearth/internal/database"
	"hearth/internal/tracing"
)

// ProjectionPrefix starts the names (and consumer groups) of the fan-out's
// projections, one per outbound topic (aggregates.Outbound):
// webhooks_orders, webhooks_plans, webhooks_schedules,
// webhooks_service_requests and webhooks_data_subjects.
const ProjectionPrefix = "webhooks_"

// Fanout turns events into pending deliveries, one per matching endpoint:
// an endpoint of the event's merchant that was enabled when the event
// occurred (webhook_endpoint_periods, migration 022: whatever it is when
// the fan-out runs), whose event types are empty or name the event's type.
// An endpoint disabled since gets the delivery too, which its worker then
// fails (listed, and redeliverable once it is enabled again).
type Fanout struct {
	db *bun.DB

	mu        sync.Mutex
	endpoints map[string]bool // merchants with an endpoint, as of asOf
	asOf      time.Time       // the database's clock when endpoints was read
	readAt    time.Time       // this process's clock then
	skipped   int             // events left out for want of an endpoint (tests)
}

// Without an endpoint of its merchant, an event gets no delivery:
// the fan-out leaves such events out before any work, by a set of the
// merchants with one, read at most endpointsEvery ago. A merchant missing
// from the set may have created an endpoint since; its created_at, set by
// the API process before the insert commits, may be a little older than
// the read, and so match an event that occurred just before the read.
// Only events that occurred endpointsGrace before the read are left out:
// a catch-up's and a replay's; the rest go through the query, as before.
const (
	endpointsEvery = time.Second
	endpointsGrace = time.Minute
)

// NewFanout returns the fan-out on the event-store database.
func NewFanout(db *bun.DB) (*Fanout, error) {
	if db == nil {
		return nil, errors.New("webhooks.NewFanout: nil db")
	}
	return &Fanout{db: db}, nil
}

// Projections are the fan-out's projections, one per aggregate type's
// topic, for the projector (and for parking and the lag metrics). Their
// groups hold retention like the read models' (cmd/app newRetention), and
// the projector's catch-up, which starts each webhook term, checks every
// read for a gap (pubsub.CheckGap): a fan-out that lost messages to
// retention stops there, naming them, rather than leave out their
// deliveries unseen.
func (f *Fanout) Projections() []projector.Projection {
	var out []projector.Projection
	for _, a := range aggregates.Outbound() { // customer.erased and staff_member.erased too
		out = append(out, projector.Projection{
			Name: projectionName(a), Topic: a.Topic, Decode: a.Decode,
			Apply:      func(ctx context.Context, r event.Recorded) error { return f.FanOut(ctx, []event.Recorded{r}, nil) },
			ApplyBatch: f.FanOut,
		})
	}
	return out
}

// ProjectionNames names the fan-out's projections, as Projections does,
// without a database: the CLI checks an operator's --projection against
// them (and the read models') before it opens one.
func ProjectionNames() []string {
	var names []string
	for _, a := range aggregates.Outbound() {
		names = append(names, projectionName(a))
	}
	return names
}

func projectionName(a aggregates.Facts) string { return ProjectionPrefix + a.Projection }

// fanOutSQL inserts the deliveries of a batch of events, from one array per
// column (a fixed text, prepared once per connection), in the batch's
// order, and returns the endpoints that got any. A redelivered event
// conflicts with its rows and adds nothing. $7 is the traceparent of the
// projection's span ("" when tracing is off): the delivery's span, later,
// is its child.
//
// An endpoint was enabled when the event occurred if the last period that
// began by then (webhook_endpoint_periods) had not ended: one probe of
// the periods' index, backwards. A test of every period that began by then
// read all of them, and every change of enabled leaves one for as long as
// the endpoint lives: a merchant that toggled its endpoints made each of
// its events read them all, in the projection every merchant's deliveries
// wait behind (TestFanOutPlan). Periods follow one another (the trigger
// opens one only when none is open); two changes of enabled from API
// instances whose clocks disagree may leave a period beginning before the
// one before it ended, and an event inside that skew is judged by the
// later one.
const fanOutSQL = `WITH queued AS (
	INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version, trace_parent)
	SELECT w.id, ev.merchant_id, ev.event_id, ev.event_type, ev.aggregate_id, ev.aggregate_version, nullif($7::text, '')
	FROM unnest($1::text[]::uuid[], $2::text[]::uuid[], $3::text[], $4::text[]::uuid[], $5::int[], $6::timestamptz[])
	     WITH ORDINALITY AS ev(event_id, merchant_id, event_type, aggregate_id, aggregate_version, occurred_at, ord)
	JOIN webhook_endpoints w ON w.merchant_id = ev.merchant_id
	     AND (cardinality(w.event_types) = 0 OR ev.event_type = ANY (w.event_types))
	     AND w.created_at <= ev.occurred_at
	     AND (SELECT p.enabled_until IS NULL OR ev.occurred_at < p.enabled_until FROM webhook_endpoint_periods p
	          WHERE p.endpoint_id = w.id AND p.enabled_from <= ev.occurred_at ORDER BY p.enabled_from DESC LIMIT 1)
	ORDER BY ev.ord, w.id
	ON CONFLICT (endpoint_id, event_id) WHERE redelivery_of IS NULL DO NOTHING
	RETURNING endpoint_id)
SELECT DISTINCT endpoint_id FROM queued`

// FanOut queues the deliveries of recs (in order) in one transaction that
// checks the leader's term first (readmodel.Fenced), running alsoInTx
// (when set) before the commit. An event without a public form is an
// error, retried and then parked like a projection's.
func (f *Fanout) FanOut(ctx context.Context, recs []event.Recorded, alsoInTx func(ctx context.Context, tx bun.Tx) error) error {
	recs, err := f.withEndpoint(ctx, recs)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		if alsoInTx == nil {
			return nil
		}
		// The catch-up's offset still moves, in a fenced transaction.
		if ctx, err = readmodel.Fenced(ctx, f.db.DB); err != nil {
			return err
		}
		return readmodel.StaleTerm(f.db.RunInTx(ctx, nil, alsoInTx))
	}
	n := len(recs)
	ids, merchants, types, aggs := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	versions, occurred := make([]int32, n), make([]time.Time, n)
	for i, r := range recs {
		pub, err := publicevent.From(publicevent.Stored{Recorded: r})
		if err != nil {
			return err
		}
		ids[i], merchants[i], types[i], aggs[i] = r.ID, r.MerchantID, pub.Type, r.StreamID
		versions[i], occurred[i] = int32(r.Version), r.OccurredAt
	}
	args := []any{ids, merchants, types, aggs, versions, occurred, tracing.Parent(ctx)}
	wake := wakeOf(ctx)
	var endpoints []string
	if alsoInTx == nil {
		endpoints, err = f.queue(ctx, wake == nil, args)
	} else {
		endpoints, err = f.queueWith(ctx, args, alsoInTx)
	}
	if err != nil {
		return readmodel.StaleTerm(fmt.Errorf("fan out %d events from %s: %w", n, ids[0], err))
	}
	if wake != nil && len(endpoints) > 0 {
		wake(endpoints)
	}
	return nil
}

// queue runs fanOutSQL with args in one transaction and one round trip:
// BEGIN, the leader's term check (readmodel.FenceSQL), the insert and
// COMMIT go as one pgx batch, where a transaction through Bun costs three
// (BEGIN with the check, the insert, COMMIT) on the path every event takes.
// notify also wakes the dispatcher through Postgres, for a fan-out outside
// the leader's router (a parked event replayed), whatever it queued. A
// failing statement aborts the transaction: what follows it in the batch
// is skipped, the first error is returned, and database.WithConn rolls
// the transaction back.
func (f *Fanout) queue(ctx context.Context, notify bool, args []any) ([]string, error) {
	fence, fenced := readmodel.FenceSQL(ctx)
	var endpoints []string
	err := database.WithConn(ctx, f.db.DB, func(conn *pgx.Conn) error {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		if fenced {
			b.Queue(fence)
		}
		b.Queue(fanOutSQL, args...)
		if notify {
			b.Queue(wakeDispatcher)
		}
		b.Queue("COMMIT")
		br := conn.SendBatch(ctx, b)
		err := func() error {
			if _, err := br.Exec(); err != nil { // BEGIN
				return err
			}
			if fenced {
				if _, err := br.Exec(); err != nil {
					return err
				}
			}
			rows, err := br.Query()
			if err != nil {
				return err
			}
			if endpoints, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return err
			}
			if notify {
				if _, err := br.Exec(); err != nil {
					return err
				}
			}
			_, err = br.Exec() // COMMIT
			return err
		}()
		return errors.Join(err, br.Close())
	})
	return endpoints, err
}

// queueWith runs fanOutSQL with args, then alsoInTx (the catch-up's offset),
// in one fenced transaction through Bun; it wakes the dispatcher through
// Postgres unless the leader's router does.
func (f *Fanout) queueWith(ctx context.Context, args []any, alsoInTx func(ctx context.Context, tx bun.Tx) error) ([]string, error) {
	wake := wakeOf(ctx)
	ctx, err := readmodel.Fenced(ctx, f.db.DB)
	if err != nil {
		return nil, err
	}
	var endpoints []string
	err = f.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		rows, err := tx.Tx.QueryContext(ctx, fanOutSQL, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			endpoints = append(endpoints, id)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		if len(endpoints) > 0 && wake == nil { // not the leader's router (a parked event replayed)
			if _, err := tx.Tx.ExecContext(ctx, wakeDispatcher); err != nil {
				return err
			}
		}
		return alsoInTx(ctx, tx)
	})
	return endpoints, err
}

// withEndpoint returns the events of recs that may have a delivery: of a
// merchant with an endpoint (enabled or not: it may have been enabled when
// the event occurred), or too recent for the set to tell (endpointsGrace).
func (f *Fanout) withEndpoint(ctx context.Context, recs []event.Recorded) ([]event.Recorded, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.endpoints == nil || time.Since(f.readAt) > endpointsEvery {
		if err := f.readEndpoints(ctx); err != nil {
			return nil, err
		}
	}
	before := f.asOf.Add(-endpointsGrace)
	out := recs[:0:0]
	for _, r := range recs {
		if f.endpoints[r.MerchantID] || !r.OccurredAt.Before(before) {
			out = append(out, r)
		}
	}
	f.skipped += len(recs) - len(out)
	return out, nil
}

// readEndpoints reads the merchants with an endpoint; f.mu is held.
func (f *Fanout) readEndpoints(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var merchants sql.NullString
	readAt := time.Now()
	if err := f.db.DB.QueryRowContext(ctx, `SELECT now(), string_agg(DISTINCT merchant_id::text, ',')
		FROM webhook_endpoints`).Scan(&f.asOf, &merchants); err != nil {
		return fmt.Errorf("read the merchants with a webhook endpoint: %w", err)
	}
	f.endpoints, f.readAt = map[string]bool{}, readAt
	if merchants.Valid {
		for _, m := range strings.Split(merchants.String, ",") {
			f.endpoints[m] = true
		}
	}
	return nil
}

type wakeKey struct{}

// withWake returns ctx in which the fan-out tells wake, after each commit,
// which endpoints got deliveries (the dispatcher of the same term).
func withWake(ctx context.Context, wake func(endpointIDs []string)) context.Context {
	return context.WithValue(ctx, wakeKey{}, wake)
}

func wakeOf(ctx context.Context) func([]string) {
	w, _ := ctx.Value(wakeKey{}).(func([]string))
	return w
}
