package refdata

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"hearth/app/ops"
	"hearth/app/publicevent"
	"hearth/domain/event"
	"hearth/internal/aggregates"
)

// CustomerHistory implements ops.ExportEventStore: the customer's record,
// the stored events of the given aggregates and the webhook deliveries of
// those events, in one REPEATABLE READ snapshot of the event store, and the
// audit entry of the export in that same transaction (the export and its
// record commit together). Each list reads at most limit+1 rows.
func (s *Store) CustomerHistory(ctx context.Context, merchantID, customerID string, aggregateIDs []string, limit int,
	audit func(ops.ExportHistory) ops.AuditEntry) (ops.ExportHistory, error) {
	var out ops.ExportHistory
	err := s.db.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead}, func(ctx context.Context, tx bun.Tx) error {
		c, err := Customers(s.db).get(ctx, tx, merchantID, customerID, false)
		if err != nil {
			return err
		}
		h := ops.ExportHistory{Customer: c, Events: []publicevent.Stored{}, WebhookDeliveries: []ops.StoredDelivery{}}
		if err := tx.QueryRowContext(ctx, `SELECT now()`).Scan(&h.At); err != nil {
			return fmt.Errorf("read the transaction's time: %w", err)
		}
		h.At = event.Instant(h.At)
		var elsewhere []publicevent.Stored
		if h.Events, elsewhere, h.Others, err = s.exportEvents(ctx, tx.Tx, merchantID, customerID, aggregateIDs, limit); err != nil {
			return err
		}
		if h.WebhookDeliveries, err = exportDeliveries(ctx, tx.Tx, merchantID, aggregateIDs, elsewhere, limit); err != nil {
			return err
		}
		if err := WriteAudit(ctx, tx, audit(h)); err != nil {
			return err
		}
		out = h
		return nil
	})
	return out, err
}

// exportEvents reads, by position, the events of the customer's
// aggregates and the events sealed for the customer on other aggregates
// (an order since moved to another customer still holds what was written
// about this one: the erasure finds it by subject_id too). Each is decoded
// as stored (an event an operator skipped in a projection is still held,
// so it is exported as it is), its fields opened only when they were
// written about this customer: an aggregate that changed hands holds
// another person's too. It returns those from other aggregates apart, and
// the ids of the events with personal fields written about another
// customer (others), whose fields the export withholds.
func (s *Store) exportEvents(ctx context.Context, tx *sql.Tx, merchantID, customerID string, ids []string, limit int) (all, elsewhere []publicevent.Stored, others map[string]bool, err error) {
	rows, err := tx.QueryContext(ctx, `SELECT position, event_id, type, stream_type, stream_id, version, merchant_id,
		occurred_at, correlation_id, causation_id, actor, data, coalesce(subject_id::text, ''), stream_id = ANY($2::text[]::uuid[]) FROM events
		WHERE merchant_id = $1 AND (stream_id = ANY($2::text[]::uuid[]) OR subject_id = $4::uuid) ORDER BY position LIMIT $3`,
		merchantID, ids, limit+1, customerID)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("select the customer's events: %w", err)
	}
	defer rows.Close()
	all, others = []publicevent.Stored{}, map[string]bool{}
	// The customer's aggregates are read whole, by position: each one's
	// events so far tell whose it was at an event that names no subject.
	read := map[string][]event.Event{}
	for rows.Next() {
		var st publicevent.Stored
		var data []byte
		var subject string
		var theirs bool
		if err := rows.Scan(&st.Position, &st.ID, &st.Type, &st.StreamType, &st.StreamID, &st.Version, &st.MerchantID,
			&st.OccurredAt, &st.CorrelationID, &st.CausationID, &st.Actor, &data, &subject, &theirs); err != nil {
			return nil, nil, nil, fmt.Errorf("scan the customer's events: %w", err)
		}
		if len(all) == limit {
			return nil, nil, nil, ops.TooLarge("events", limit)
		}
		facts, ok := aggregates.ByType(st.StreamType)
		if !ok {
			return nil, nil, nil, fmt.Errorf("event %s: unknown stream type %q", st.ID, st.StreamType)
		}
		st.Data, st.OccurredAt = data, event.Instant(st.OccurredAt)
		if st.Event, err = facts.Decode(st.Type, data); err != nil {
			return nil, nil, nil, fmt.Errorf("event %s: %w", st.ID, err)
		}
		if theirs {
			read[st.StreamID] = append(read[st.StreamID], st.Event)
		}
		if len(facts.Personal[st.Type]) > 0 {
			// An event written before sealing (app protect not run yet)
			// names no subject and holds its fields in clear: they are
			// the customer's the aggregate had then.
			owner := subject
			if owner == "" {
				if owner, err = ownerAt(facts, st.StreamID, read); err != nil {
					return nil, nil, nil, fmt.Errorf("event %s: %w", st.ID, err)
				}
			}
			if owner == customerID {
				if st.Event, err = aggregates.Or(s.Decoders).Decoder(facts)(st.Type, data); err != nil {
					return nil, nil, nil, fmt.Errorf("event %s: %w", st.ID, err)
				}
			} else {
				others[st.ID] = true
			}
		}
		all = append(all, st)
		if !theirs {
			elsewhere = append(elsewhere, st)
		}
	}
	return all, elsewhere, others, rows.Err()
}

// ownerAt returns the customer a stream of the export had at its last
// event read (read holds each stream's events so far, as stored): a
// schedule that did not record its customer (before sealing) has its
// order's, whose events before it were read too (the schedules exported
// are those of the customer's orders).
func ownerAt(facts aggregates.Facts, streamID string, read map[string][]event.Event) (string, error) {
	switch facts.Type {
	case aggregates.Order.Type:
		o, err := aggregates.Order.Rehydrate(read[streamID])
		if err != nil {
			return "", fmt.Errorf("order %s: %w", streamID, err)
		}
		return o.CustomerID(), nil
	case aggregates.ServiceRequest.Type:
		r, err := aggregates.ServiceRequest.Rehydrate(read[streamID])
		if err != nil {
			return "", fmt.Errorf("service request %s: %w", streamID, err)
		}
		return r.CustomerID(), nil
	case aggregates.Schedule.Type:
		sch, err := aggregates.Schedule.Rehydrate(read[streamID])
		if err != nil {
			return "", fmt.Errorf("schedule %s: %w", streamID, err)
		}
		if sch.CustomerID() != "" {
			return sch.CustomerID(), nil
		}
		return ownerAt(aggregates.Order.Facts, sch.OrderID(), read)
	}
	return "", fmt.Errorf("%s %s: no customer to tell whose its fields are", facts.Type, streamID)
}

// exportDeliveries reads the webhook deliveries of the aggregates' events
// and of the events also (of other aggregates; pings concern no customer),
// by endpoint and insertion order, through the index
// webhook_deliveries_aggregate.
func exportDeliveries(ctx context.Context, tx *sql.Tx, merchantID string, ids []string, also []publicevent.Stored, limit int) ([]ops.StoredDelivery, error) {
	alsoEvents, alsoAggregates := make([]string, len(also)), make([]string, len(also))
	for i, e := range also {
		alsoEvents[i], alsoAggregates[i] = e.ID, e.StreamID
	}
	rows, err := tx.QueryContext(ctx, `SELECT d.id, d.endpoint_id, d.merchant_id, d.event_id, d.event_type,
		d.aggregate_id, d.aggregate_version, coalesce(d.redelivery_of::text, ''), d.status, d.attempts,
		CASE WHEN d.status = 'pending' THEN d.next_attempt_at END, d.first_attempt_at, d.last_attempt_at,
		coalesce(d.response_status, 0), coalesce(d.latency_ms, 0), d.error, d.created_at, d.completed_at, e.url
		FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
		WHERE (d.aggregate_id = ANY($2::text[]::uuid[])
		       OR d.aggregate_id = ANY($5::text[]::uuid[]) AND d.event_id = ANY($4::text[]::uuid[]))
		  AND d.merchant_id = $1 AND d.ping_payload IS NULL
		ORDER BY d.endpoint_id, d.seq LIMIT $3`, merchantID, ids, limit+1, alsoEvents, alsoAggregates)
	if err != nil {
		return nil, fmt.Errorf("select the customer's webhook deliveries: %w", err)
	}
	defer rows.Close()
	out := []ops.StoredDelivery{}
	for rows.Next() {
		var d ops.StoredDelivery
		var latencyMS float64
		if err := rows.Scan(&d.ID, &d.EndpointID, &d.MerchantID, &d.EventID, &d.EventType, &d.AggregateID,
			&d.AggregateVersion, &d.RedeliveryOf, &d.Status, &d.Attempts, &d.NextAttemptAt, &d.FirstAttemptAt,
			&d.LastAttemptAt, &d.ResponseStatus, &latencyMS, &d.Error, &d.CreatedAt, &d.CompletedAt, &d.URL); err != nil {
			return nil, fmt.Errorf("scan the customer's webhook deliveries: %w", err)
		}
		if len(out) == limit {
			return nil, ops.TooLarge("webhook deliveries", limit)
		}
		d.Latency = time.Duration(latencyMS * float64(time.Millisecond))
		d.CreatedAt = event.Instant(d.CreatedAt)
		d.NextAttemptAt, d.FirstAttemptAt = event.InstantPtr(d.NextAttemptAt), event.InstantPtr(d.FirstAttemptAt)
		d.LastAttemptAt, d.CompletedAt = event.InstantPtr(d.LastAttemptAt), event.InstantPtr(d.CompletedAt)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

var _ ops.ExportEventStore = (*Store)(nil)
