package webhooks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"hearth/adapters/pubsub/projector"
	"hearth/adapters/readmodel"
	"hearth/app/publicevent"
	"hearth/domain/event"
	"hearth/internal/aggregates"
	"hearth/internal/tracing"
)

// ProjectionPrefix starts the names (and consumer groups) of the fan-out's
// projections: webhooks_orders, webhooks_schedules,
// webhooks_service_requests.
const ProjectionPrefix = "webhooks_"

// Fanout turns events into pending deliveries, one per matching endpoint:
// an enabled endpoint of the event's merchant, created before the event
// occurred, whose event types are empty or name the event's type.
type Fanout struct {
	db *bun.DB
}

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
			Name: ProjectionPrefix + a.Projection, Topic: a.Topic, Decode: a.Decode,
			Apply:      func(ctx context.Context, r event.Recorded) error { return f.FanOut(ctx, []event.Recorded{r}, nil) },
			ApplyBatch: f.FanOut,
		})
	}
	return out
}

// fanOutSQL inserts the deliveries of a batch of events, from one array per
// column (a fixed text, prepared once per connection), in the batch's
// order, and returns the endpoints that got any. A redelivered event
// conflicts with its rows and adds nothing. $7 is the traceparent of the
// projection's span ("" when tracing is off): the delivery's span, later,
// is its child.
const fanOutSQL = `WITH queued AS (
	INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version, trace_parent)
	SELECT w.id, ev.merchant_id, ev.event_id, ev.event_type, ev.aggregate_id, ev.aggregate_version, nullif($7::text, '')
	FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::uuid[], $5::int[], $6::timestamptz[])
	     WITH ORDINALITY AS ev(event_id, merchant_id, event_type, aggregate_id, aggregate_version, occurred_at, ord)
	JOIN webhook_endpoints w ON w.merchant_id = ev.merchant_id AND w.enabled
	     AND (cardinality(w.event_types) = 0 OR ev.event_type = ANY (w.event_types))
	     AND w.created_at <= ev.occurred_at
	ORDER BY ev.ord, w.id
	ON CONFLICT (endpoint_id, event_id) WHERE redelivery_of IS NULL DO NOTHING
	RETURNING endpoint_id)
SELECT DISTINCT endpoint_id FROM queued`

// FanOut queues the deliveries of recs (in order) in one transaction that
// checks the leader's term first (readmodel.Fenced), running alsoInTx
// (when set) before the commit. An event without a public form is an
// error, retried and then parked like a projection's.
func (f *Fanout) FanOut(ctx context.Context, recs []event.Recorded, alsoInTx func(ctx context.Context, tx bun.Tx) error) error {
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
	ctx, err := readmodel.Fenced(ctx, f.db.DB)
	if err != nil {
		return err
	}
	wake := wakeOf(ctx)
	var endpoints []string
	err = f.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		rows, err := tx.Tx.QueryContext(ctx, fanOutSQL, ids, merchants, types, aggs, versions, occurred, tracing.Parent(ctx))
		if err != nil {
			return fmt.Errorf("fan out %d events from %s: %w", n, ids[0], err)
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
		if alsoInTx != nil {
			return alsoInTx(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return readmodel.StaleTerm(err)
	}
	if wake != nil && len(endpoints) > 0 {
		wake(endpoints)
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
