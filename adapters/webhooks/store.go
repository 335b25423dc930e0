// Package webhooks delivers Hearth's public events to the URLs operators
// register: the endpoints and the delivery log (Store), the fan-out of
// events into the outbox of deliveries (Fanout), and the delivery itself
// (Dispatcher, Sender), run by the webhook leader (Run).
//
// # How a delivery flows
//
//  1. Fan-out. On the webhook leader, one projection per outbound topic
//     (consumer groups webhooks_orders, webhooks_plans, webhooks_schedules,
//     webhooks_service_requests, webhooks_data_subjects) runs through the
//     projector like the read models: catch-up, then a Watermill router woken by NOTIFY, with its
//     retries, poison queue and parking. For each event (or batch) it
//     inserts one pending row per matching endpoint (enabled when the event
//     occurred: webhook_endpoint_periods) into webhook_deliveries, in one transaction that checks the leader's term
//     first (hearth_es_fence). A redelivered event inserts nothing twice
//     (a unique index on endpoint and event).
//  2. Dispatch. The Dispatcher runs one worker per endpoint with pending
//     rows. A worker's round is one fenced transaction that records the
//     outcomes of the round before and claims the next deliveries: the
//     first pending row of each aggregate (by version) whose time has
//     come. So an aggregate's next event goes out only once the one before
//     it succeeded, while other aggregates, other endpoints and other
//     merchants go on: a slow or failing endpoint holds up only its own
//     worker. The claimed deliveries are sent concurrently (at most
//     inFlightPerEndpoint), each bounded by the timeout.
//  3. Outcome. A 2xx succeeds. A 410 disables the endpoint at once (but
//     a test ping's, which never disables it). Any
//     other answer, or none, is retried on the schedule (webhook.Schedule),
//     and so is a body that could not be built for a passing cause (a
//     data-key lookup); once a delivery's retries run out the endpoint is
//     disabled with the reason (unless its URL changed since the attempt,
//     or another delivery to it succeeded since the given-up one's first
//     attempt: then that delivery fails with its aggregate's pending ones,
//     and the endpoint goes on), and its pending deliveries fail. A test ping is tried once. Each
//     error text recorded is storable (cleaned, bounded); failPending's
//     note may follow one.
//
// A claim moves the delivery's next attempt past the send's timeout, and
// no send starts that could end after that (a round's later sends to a
// slow receiver are claimed again by the next round), so a leader that
// dies or stalls while sending leaves it to the next leader after that
// hold; a leader that steps down gracefully puts back what it claimed but
// did not send. Delivery is at least once: an attempt whose answer was lost
// is sent again, with the same webhook-id.
package webhooks

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"hearth/app/access"
	"hearth/app/command"
	"hearth/app/ops"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/webhook"
	"hearth/internal/idempotency"
	"hearth/internal/tracing"
)

// Store keeps the endpoints and reads the delivery log, on the event-store
// database (the API's request pool). It implements command.WebhookStore and
// query.WebhookReads.
type Store struct {
	db      *sql.DB
	secrets Sealer
}

// NewStore returns a store on the event-store database, which keeps the
// signing secrets sealed by secrets.
func NewStore(db *sql.DB, secrets Sealer) (*Store, error) {
	if db == nil || secrets == nil {
		return nil, errors.New("webhooks.NewStore: db and secrets are required")
	}
	return &Store{db: db, secrets: secrets}, nil
}

// wakeDispatcher is the notification that tells the webhook leader's
// dispatcher that deliveries were queued outside its own fan-out (a test
// ping, a redelivery, a parked event replayed): the projector's notifier
// listens on the same channel.
const wakeDispatcher = `SELECT pg_notify('hearth_topics', 'webhook_deliveries')`

// DeliveriesTable is the name wakeDispatcher announces.
const DeliveriesTable = "webhook_deliveries"

type scanner interface{ Scan(dest ...any) error }

// scanEndpoint reads an endpoint of endpointColumns, its secrets opened.
func scanEndpoint(row scanner, secrets Sealer) (webhook.Endpoint, error) {
	e, _, err := scanEndpointSlots(row, secrets)
	return e, err
}

// scanEndpointUnopened is scanEndpoint without its secrets (empty): the
// API's reads show none, and a secret sealed by a master key this instance
// does not have (a lost key, a backup from before a rotation) would
// otherwise fail every read of the merchant's endpoints, list included,
// where only that endpoint's signing (and the writes that keep its
// secrets) can fail.
func scanEndpointUnopened(row scanner) (webhook.Endpoint, error) {
	e, _, err := scanEndpointSlots(row, nil)
	return e, err
}

// scanEndpointSlots is scanEndpoint, with the secrets as stored; a nil
// secrets leaves them unopened (scanEndpointUnopened).
func scanEndpointSlots(row scanner, secrets Sealer) (webhook.Endpoint, [3]storedSecret, error) {
	var e webhook.Endpoint
	var types []byte
	var slots [3]storedSecret
	err := row.Scan(&e.ID, &e.MerchantID, &e.URL, &types, &e.Description, &e.Enabled, &e.DisabledReason,
		&e.DisabledAt, &slots[0].plain, &slots[0].sealed, &slots[1].plain, &slots[1].sealed, &e.PreviousSecretUntil,
		&slots[2].plain, &slots[2].sealed, &e.OlderSecretUntil, &e.Version, &e.CreatedAt, &e.UpdatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return e, slots, apperr.ErrNotFound
	}
	if err != nil {
		return e, slots, err
	}
	for i, dst := range []*string{&e.Secret, &e.PreviousSecret, &e.OlderSecret} {
		if secrets == nil {
			break
		}
		if *dst, err = slots[i].open(secrets, e.ID); err != nil {
			return e, slots, err
		}
	}
	if err := json.Unmarshal(types, &e.EventTypes); err != nil {
		return e, slots, fmt.Errorf("webhook endpoint %s: event types: %w", e.ID, err)
	}
	e.CreatedAt, e.UpdatedAt = e.CreatedAt.UTC(), e.UpdatedAt.UTC()
	e.DisabledAt, e.PreviousSecretUntil, e.OlderSecretUntil = utc(e.DisabledAt), utc(e.PreviousSecretUntil), utc(e.OlderSecretUntil)
	return e, slots, nil
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// inTx runs fn in one transaction on db, and stores the answer of an
// idempotent attempt (command.IdempotentOf) from what result returns, in
// it. It is the one place the endpoints' writes open their transactions,
// so that each checks the request's key there first, as the event store's
// and the reference records' writes do (access.KeyCheck): the API server
// vouches for a key from its cache for up to KEY_CACHE_TTL, and only a
// check inside the write's transaction, before anything it reads or
// writes, keeps a key revoked before the write began from creating,
// changing or deleting an endpoint, rotating its secret or queueing a
// delivery (access.ErrKeyRefused, nothing written).
func inTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) (result any, err error)) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreDone(tx.Rollback()))
		}
	}()
	if check := access.PendingKeyCheck(ctx); check != nil {
		if err := check.Run(func(q string, args ...any) error { _, err := tx.ExecContext(ctx, q, args...); return err }); err != nil {
			return err
		}
	}
	result, err := fn(tx)
	if err != nil {
		return err
	}
	if i := command.IdempotentOf(ctx); i != nil {
		if err := idempotency.Seal(ctx, tx, i, result); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

// writeAudit records a's entry in tx, the write's own transaction: the
// write and its record commit together, or neither does.
func writeAudit(ctx context.Context, tx *sql.Tx, a command.Audit) error {
	if err := ops.CheckActor(a.Actor); err != nil {
		return err
	}
	details, err := json.Marshal(a.Details)
	if err != nil {
		return fmt.Errorf("audit details: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO admin_audit (actor, action, target, details) VALUES ($1, $2, $3, $4::jsonb)`,
		a.Actor, a.Action, a.Target, string(details)); err != nil {
		return fmt.Errorf("record %s in the audit log: %w", a.Action, err)
	}
	return nil
}

// InsertEndpoint stores a new endpoint, unless the merchant has
// webhook.MaxEndpoints already (the merchant's row is locked while it
// counts, so two creates cannot both pass), and records audit.
func (s *Store) InsertEndpoint(ctx context.Context, e *webhook.Endpoint, audit command.Audit) error {
	return inTx(ctx, s.db, func(tx *sql.Tx) (any, error) {
		var n int
		err := tx.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM webhook_endpoints WHERE merchant_id = m.id)
			FROM merchants m WHERE m.id = $1 FOR NO KEY UPDATE OF m`, e.MerchantID).Scan(&n)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("merchant %s does not exist", e.MerchantID)
		}
		if err != nil {
			return nil, fmt.Errorf("count webhook endpoints: %w", err)
		}
		if n >= webhook.MaxEndpoints {
			return nil, &apperr.RuleError{Rule: webhook.RuleEndpointLimit,
				Detail: fmt.Sprintf("a merchant may have at most %d webhook endpoints; delete one first", webhook.MaxEndpoints)}
		}
		secret, _, _, err := sealSecrets(s.secrets, e)
		if err != nil {
			return nil, err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO webhook_endpoints
			(id, merchant_id, url, event_types, description, enabled, secret_sealed, version, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			e.ID, e.MerchantID, e.URL, nonNil(e.EventTypes), e.Description, e.Enabled, secret, e.Version, e.CreatedAt, e.UpdatedAt)
		if err != nil {
			return nil, fmt.Errorf("insert webhook endpoint: %w", err)
		}
		return e, writeAudit(ctx, tx, audit)
	})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// UpdateEndpoint changes one endpoint of the merchant and records audit's
// entry of the change, in one transaction.
func (s *Store) UpdateEndpoint(ctx context.Context, merchantID, id string, fn func(e *webhook.Endpoint) error,
	audit func(before, after webhook.Endpoint) command.Audit) (webhook.Endpoint, error) {
	var out webhook.Endpoint
	err := inTx(ctx, s.db, func(tx *sql.Tx) (any, error) {
		e, err := scanEndpoint(tx.QueryRowContext(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints
			WHERE merchant_id = $1 AND id = $2 FOR UPDATE`, merchantID, id), s.secrets)
		if err != nil {
			return nil, err
		}
		before := e
		before.EventTypes = slices.Clone(e.EventTypes)
		if err := fn(&e); err != nil {
			return nil, err
		}
		current, previous, older, err := sealSecrets(s.secrets, &e)
		if err != nil {
			return nil, err
		}
		_, err = tx.ExecContext(ctx, `UPDATE webhook_endpoints SET url = $3, event_types = $4, description = $5,
			enabled = $6, disabled_reason = $7, disabled_at = $8, secret = NULL, secret_sealed = $9,
			previous_secret = NULL, previous_secret_sealed = $10, previous_secret_until = $11,
			older_secret = NULL, older_secret_sealed = $14, older_secret_until = $15, version = $12, updated_at = $13
			WHERE merchant_id = $1 AND id = $2`, merchantID, id, e.URL, nonNil(e.EventTypes), e.Description,
			e.Enabled, e.DisabledReason, e.DisabledAt, current, previous, e.PreviousSecretUntil, e.Version, e.UpdatedAt,
			older, e.OlderSecretUntil)
		if err != nil {
			return nil, fmt.Errorf("update webhook endpoint: %w", err)
		}
		if err := writeAudit(ctx, tx, audit(before, e)); err != nil {
			return nil, err
		}
		out = e
		return &out, nil
	})
	return out, err
}

// DeleteEndpoint deletes one endpoint of the merchant, with expected set
// only while it is at that version, and records audit's entry of it, in
// one transaction (inTx, which checks the request's key first). Its
// deliveries are not deleted here: its log may hold millions, which one
// statement of the request would lock and delete under the request's
// statement timeout. A trigger records the endpoint in
// webhook_endpoints_deleted, and the webhook leader's pruning deletes its
// log a batch at a time (Dispatcher.prune); nothing reads it meanwhile.
func (s *Store) DeleteEndpoint(ctx context.Context, merchantID, id string, expected *int, audit func(deleted webhook.Endpoint) command.Audit) error {
	return inTx(ctx, s.db, func(tx *sql.Tx) (any, error) {
		deleted := webhook.Endpoint{ID: id, MerchantID: merchantID}
		if expected != nil {
			// Compared on the locked row: of a change and a delete that
			// read the same version, the one that commits second is stale.
			err := tx.QueryRowContext(ctx, `SELECT version FROM webhook_endpoints WHERE merchant_id = $1 AND id = $2 FOR UPDATE`,
				merchantID, id).Scan(&deleted.Version)
			if errors.Is(err, sql.ErrNoRows) {
				return nil, apperr.ErrNotFound
			}
			if err != nil {
				return nil, fmt.Errorf("read webhook endpoint: %w", err)
			}
			if deleted.Version != *expected {
				return nil, &apperr.VersionError{Kind: "webhook endpoint", ID: id, Expected: *expected, Actual: deleted.Version}
			}
		}
		err := tx.QueryRowContext(ctx, `DELETE FROM webhook_endpoints WHERE merchant_id = $1 AND id = $2 RETURNING url`,
			merchantID, id).Scan(&deleted.URL)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, apperr.ErrNotFound
		}
		if err != nil {
			return nil, fmt.Errorf("delete webhook endpoint: %w", err)
		}
		return nil, writeAudit(ctx, tx, audit(deleted))
	})
}

// QueueDelivery queues the delivery make returns for the merchant's
// endpoint and wakes the dispatcher at the commit, unless the endpoint has
// webhook.MaxQueued test pings and redeliveries pending (a
// *apperr.LimitError). The endpoint is read FOR NO KEY UPDATE: it cannot be
// disabled or deleted before the commit, and two queueings of one endpoint
// take turns, so that both cannot count one below the cap and pass it; the
// fan-out's inserts do not wait for it.
func (s *Store) QueueDelivery(ctx context.Context, merchantID, endpointID string, make func(e webhook.Endpoint) (webhook.Delivery, error)) (webhook.Delivery, error) {
	var out webhook.Delivery
	err := inTx(ctx, s.db, func(tx *sql.Tx) (any, error) {
		e, err := scanEndpoint(tx.QueryRowContext(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints
			WHERE merchant_id = $1 AND id = $2 FOR NO KEY UPDATE`, merchantID, endpointID), s.secrets)
		if err != nil {
			return nil, err
		}
		d, err := make(e)
		if err != nil {
			return nil, err
		}
		if err := queueRoom(ctx, tx, endpointID); err != nil {
			return nil, err
		}
		var ping []byte
		if d.Ping {
			ping = d.Body
		}
		// The delivery's attempts join the trace of the operator's request
		// (tracing on), as an event's join the trace of its write.
		out, err = scanDelivery(tx.QueryRowContext(ctx, `INSERT INTO webhook_deliveries
			(id, endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version, ping_payload, redelivery_of, trace_parent)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, nullif($9, '')::uuid, nullif($10, ''))
			RETURNING `+deliveryColumns, d.ID, d.EndpointID, d.MerchantID, d.EventID, d.EventType, d.AggregateID,
			d.AggregateVersion, ping, d.RedeliveryOf, tracing.Parent(ctx)))
		if err != nil {
			return nil, fmt.Errorf("queue webhook delivery: %w", err)
		}
		if _, err := tx.ExecContext(ctx, wakeDispatcher); err != nil {
			return nil, err
		}
		return &out, nil
	})
	return out, err
}

// queuedCountSQL counts the endpoint's pending test pings and redeliveries
// through webhook_deliveries_queued (its predicate), stopping at the cap
// ($2): a refusal reads at most that many index entries, however many
// other rows the endpoint has (TestQueuedCountPlan).
const queuedCountSQL = `SELECT count(*) FROM (SELECT FROM webhook_deliveries
	WHERE endpoint_id = $1 AND status = 'pending' AND (ping_payload IS NOT NULL OR redelivery_of IS NOT NULL) LIMIT $2) q`

// queueRoom refuses one more test ping or redelivery for an endpoint that
// has webhook.MaxQueued of them pending.
func queueRoom(ctx context.Context, tx *sql.Tx, endpointID string) error {
	var n int
	if err := tx.QueryRowContext(ctx, queuedCountSQL, endpointID, webhook.MaxQueued).Scan(&n); err != nil {
		return fmt.Errorf("count queued webhook deliveries: %w", err)
	}
	if n < webhook.MaxQueued {
		return nil
	}
	return &apperr.LimitError{Limit: webhook.LimitQueued, RetryAfter: webhook.QueuedRetryAfter,
		Detail: fmt.Sprintf("this endpoint has %d test pings and redeliveries pending, the most it may have: "+
			"wait until some are sent (GET .../deliveries?status=pending shows them; a receiver that does not answer "+
			"keeps redeliveries pending for their whole retry schedule, so fix it first), then retry", webhook.MaxQueued)}
}

const deliveryColumns = `id, endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version,
	ping_payload IS NOT NULL, ping_payload, coalesce(redelivery_of::text, ''), status, attempts,
	CASE WHEN status = 'pending' THEN next_attempt_at END, first_attempt_at, last_attempt_at,
	coalesce(response_status, 0), coalesce(latency_ms, 0), error, created_at, completed_at`

// scanDelivery reads deliveryColumns, and the columns after them into
// more.
func scanDelivery(row scanner, more ...any) (webhook.Delivery, error) {
	var d webhook.Delivery
	var latencyMS float64
	err := row.Scan(append([]any{&d.ID, &d.EndpointID, &d.MerchantID, &d.EventID, &d.EventType, &d.AggregateID, &d.AggregateVersion,
		&d.Ping, &d.Body, &d.RedeliveryOf, &d.Status, &d.Attempts, &d.NextAttemptAt, &d.FirstAttemptAt, &d.LastAttemptAt,
		&d.ResponseStatus, &latencyMS, &d.Error, &d.CreatedAt, &d.CompletedAt}, more...)...)
	if errors.Is(err, sql.ErrNoRows) {
		return d, apperr.ErrNotFound
	}
	d.Latency = time.Duration(latencyMS * float64(time.Millisecond))
	d.CreatedAt = d.CreatedAt.UTC()
	d.NextAttemptAt, d.FirstAttemptAt, d.LastAttemptAt, d.CompletedAt = utc(d.NextAttemptAt), utc(d.FirstAttemptAt), utc(d.LastAttemptAt), utc(d.CompletedAt)
	return d, err
}

// Endpoints returns a page of the merchant's endpoints, newest first,
// without their secrets.
func (s *Store) Endpoints(ctx context.Context, merchantID string, p query.Page) ([]webhook.Endpoint, int, error) {
	var total int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM webhook_endpoints WHERE merchant_id = $1`, merchantID).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("count webhook endpoints: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE merchant_id = $1
		ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3`, merchantID, p.Size, p.Offset())
	if err != nil {
		return nil, 0, fmt.Errorf("list webhook endpoints: %w", err)
	}
	defer rows.Close()
	var out []webhook.Endpoint
	for rows.Next() {
		e, err := scanEndpointUnopened(rows)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, e)
	}
	return out, total, rows.Err()
}

// Endpoint returns one endpoint of the merchant, without its secrets.
func (s *Store) Endpoint(ctx context.Context, merchantID, id string) (webhook.Endpoint, error) {
	return scanEndpointUnopened(s.db.QueryRowContext(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints
		WHERE merchant_id = $1 AND id = $2`, merchantID, id))
}

// logOrder names the delivery log's order (newest first, by insertion) in
// its cursors.
const logOrder = "seq"

// Deliveries returns a page of the endpoint's log, newest first, of the
// given statuses (all when none), as internal/keyset pages the other
// lists: a numbered page (at most query.MaxDepth rows deep: the port
// checks) or the rows after a cursor (keyset, through webhook_deliveries_log
// from the cursor's delivery), and the count behind the total stops at
// query.MaxDepth.
func (s *Store) Deliveries(ctx context.Context, merchantID, endpointID string, statuses []string, p query.Page) (query.List[webhook.Delivery], error) {
	var l query.List[webhook.Delivery]
	if p.After != nil && p.After.Order != logOrder {
		return l, apperr.Invalid("cursor", "was made for a list sorted by %s; this one is sorted by %s: start again without a cursor", p.After.Order, logOrder)
	}
	if _, err := s.Endpoint(ctx, merchantID, endpointID); err != nil {
		return l, err
	}
	var filter any // NULL: every status
	if len(statuses) > 0 {
		filter = statuses
	}
	before, offset := int64(math.MaxInt64), p.Offset()
	if p.After != nil {
		err := s.db.QueryRowContext(ctx, `SELECT seq FROM webhook_deliveries WHERE id = $1 AND endpoint_id = $2`, p.After.ID, endpointID).Scan(&before)
		if errors.Is(err, sql.ErrNoRows) {
			return l, apperr.Invalid("cursor", "names a delivery no longer in the log (finished deliveries are kept WEBHOOK_DELIVERY_KEEP): start again without a cursor")
		}
		if err != nil {
			return l, fmt.Errorf("read webhook delivery cursor: %w", err)
		}
		offset = 0
	}
	var n int
	// Counting stops at MaxDepth + 1 rows: enough to tell "more".
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT FROM webhook_deliveries
		WHERE endpoint_id = $1 AND ($2::text[] IS NULL OR status = ANY ($2)) LIMIT $3) matching`,
		endpointID, filter, query.MaxDepth+1).Scan(&n); err != nil {
		return l, fmt.Errorf("count webhook deliveries: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+deliveryColumns+`, seq FROM webhook_deliveries
		WHERE endpoint_id = $1 AND ($2::text[] IS NULL OR status = ANY ($2)) AND seq < $5
		ORDER BY seq DESC LIMIT $3 OFFSET $4`, endpointID, filter, p.Size+1, offset, before)
	if err != nil {
		return l, fmt.Errorf("list webhook deliveries: %w", err)
	}
	defer rows.Close()
	l = query.List[webhook.Delivery]{Items: []webhook.Delivery{}, Total: min(n, query.MaxDepth), TotalExact: n <= query.MaxDepth, PageSize: p.Size}
	if p.After == nil {
		l.Page = p.Number
	}
	for rows.Next() {
		var seq int64
		d, err := scanDelivery(rows, &seq)
		if err != nil {
			return l, err
		}
		if len(l.Items) == p.Size { // one more: the page before it is not the last
			last := l.Items[len(l.Items)-1]
			l.Next = &query.Cursor{Order: logOrder, At: last.CreatedAt, ID: last.ID}
			break
		}
		l.Items = append(l.Items, d)
	}
	return l, rows.Err()
}

// Delivery returns one delivery of the merchant's endpoint. A deleted
// endpoint's deliveries stay in the table until the pruning takes them
// (migration 033): they are no one's to see or redeliver.
func (s *Store) Delivery(ctx context.Context, merchantID, endpointID, id string) (webhook.Delivery, error) {
	return scanDelivery(s.db.QueryRowContext(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries
		WHERE merchant_id = $1 AND endpoint_id = $2 AND id = $3
		  AND EXISTS (SELECT FROM webhook_endpoints e WHERE e.id = $2 AND e.merchant_id = $1)`, merchantID, endpointID, id))
}
