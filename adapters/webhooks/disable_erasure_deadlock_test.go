package webhooks

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/vault"
	"hearth/app/command"
	"hearth/app/ops"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/domain/webhook"
	"hearth/internal/keyring"
	"hearth/internal/pgtest"
)

// A customer's erasure scrubs the receivers' error texts of the
// deliveries of their orders, locking them in id order; a worker that
// finds its endpoint disabled fails the endpoint's pending deliveries.
// Pending deliveries that were tried already carry their receiver's words,
// so the two statements lock the same rows: the worker may not take them
// in the order its scan meets them (insertion order, by the index of the
// pending deliveries or the heap), or each transaction holds a row the
// other waits for (a deadlock, and one of them fails).
//
// The steps are ordered by the locks they wait for (pg_blocking_pids),
// never by time, as in the erasure's deadlock tests: three pending
// deliveries of one order, inserted as d3, d2, d1 with ids in the order
// d1, d2, d3; a third transaction holds d2, so the erasure takes d1 and
// waits for d2; the worker then takes d3 (its scan's first row) and waits
// for d2 too; the third transaction ends.
func TestFailingADisabledEndpointsDeliveriesDoesNotDeadlockWithAnErasure(t *testing.T) {
	t.Parallel()
	r := newErasureRace(t, "d3", "d2", "d1")
	_, err := r.db.Exec(`UPDATE webhook_endpoints SET enabled = false, disabled_reason = 'by an operator', disabled_at = now() WHERE id = $1`, r.endpoint)
	require.NoError(t, err)

	r.run(t, nil)
	r.requireFailed(t, r.ids, "(erased); then: the endpoint is disabled")
}

// The same, in the round that disables the endpoint: it records the
// attempt that gave up first (d3, claimed, so pending until then), then
// fails the endpoint's other pending deliveries (d1, d2). The erasure
// takes d1 and waits for d2, held by a third transaction; the round
// records d3 and then waits for d1. Once the third transaction ends, the
// erasure would wait for d3, which the round holds.
func TestTheRoundThatDisablesAnEndpointDoesNotDeadlockWithAnErasure(t *testing.T) {
	t.Parallel()
	r := newErasureRace(t, "d1", "d2", "d3")
	r.run(t, []result{{id: r.ids[2], status: webhook.Failed, code: 500, err: "the receiver said: still d3",
		disable: "its retries ran out", url: "https://example.com/"}})
	r.requireFailed(t, r.ids[:2], "(erased); then: the endpoint was disabled: its retries ran out")
	r.requireFailed(t, r.ids[2:], "(erased)")
}

// erasureRace is a customer with one order, and three pending deliveries
// of it to one endpoint, tried once (their receiver's words recorded),
// with ids in the order d1, d2, d3.
type erasureRace struct {
	db                           *sql.DB
	store                        *pubsub.Store
	merchant, customer, endpoint string
	ids                          []string
}

// newErasureRace inserts the deliveries in the order named.
func newErasureRace(t *testing.T, order ...string) erasureRace {
	t.Helper()
	bdb := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	r := erasureRace{db: bdb.DB}
	ctx := t.Context()
	line, err := keyring.New("test")
	require.NoError(t, err)
	ring, err := keyring.Parse(line)
	require.NoError(t, err)
	v, err := vault.New(r.db, ring)
	require.NoError(t, err)
	r.store, err = pubsub.NewStore(bdb, nil, v)
	require.NoError(t, err)
	tx, err := pubsub.NewTransactor(r.store)
	require.NoError(t, err)
	orders, err := command.NewOrderHandlers(tx)
	require.NoError(t, err)
	r.merchant, r.endpoint = anEndpoint(t, bdb, "https://example.com/")
	r.customer = uuid.New()
	_, err = r.db.Exec(`INSERT INTO customers (id, merchant_id, name) VALUES ($1, $2, 'Ada')`, r.customer, r.merchant)
	require.NoError(t, err)
	w, err := orders.Create(ctx, command.CreateOrder{CustomerID: r.customer, AmountCents: 500, Notes: "gate code 1234",
		Meta: event.Meta{MerchantID: r.merchant, Actor: "key:test", CorrelationID: uuid.New(), OccurredAt: time.Now()}})
	require.NoError(t, err)
	r.ids = []string{uuid.New(), uuid.New(), uuid.New()}
	slices.Sort(r.ids) // the text of a uuid sorts as the uuid does
	for i, key := range order {
		_, err := r.db.Exec(`INSERT INTO webhook_deliveries (id, endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version,
				status, attempts, response_status, error, next_attempt_at)
			VALUES ($1, $2, $3, $4, 'order.updated', $5, $6, 'pending', 1, 500, $7, now() + interval '1 hour')`,
			r.ids[key[1]-'1'], r.endpoint, r.merchant, uuid.New(), w.Stream[0].StreamID, i+1, "the receiver said: "+key)
		require.NoError(t, err)
	}
	return r
}

// run holds d2, starts the erasure, waits until it waits for d2, starts a
// round of the endpoint's worker recording results, waits until it waits
// for the erasure, lets d2 go, and requires both to succeed.
func (r erasureRace) run(t *testing.T, results []result) {
	t.Helper()
	ctx := t.Context()
	hold, holderPID := r.hold(t, r.ids[1])

	erased := make(chan error, 1)
	go func() {
		_, err := r.store.EraseSubject(context.WithoutCancel(ctx), ops.ErasureRequest{By: "test", MerchantID: r.merchant,
			SubjectType: event.SubjectCustomer, SubjectID: r.customer, Confirm: r.customer, CorrelationID: uuid.New()},
			func(ops.Erasure) ops.AuditEntry {
				return ops.AuditEntry{Actor: "test", Action: ops.ActionCustomerErase, Target: "customer/" + r.customer}
			})
		erased <- err
	}()
	erasurePID := r.blockedBy(t, holderPID, "the erasure waits for d2")

	d := r.dispatcher(t)
	failed := make(chan error, 1)
	go func() {
		_, _, _, err := d.round(context.WithoutCancel(ctx), r.endpoint, results, false)
		failed <- err
	}()
	r.blockedBy(t, erasurePID, "the worker waits for the erasure")
	require.NoError(t, hold.Commit())

	for _, err := range []error{<-erased, <-failed} {
		if err != nil && strings.Contains(err.Error(), "40P01") {
			require.Fail(t, "a deadlock", "%v", err)
		}
		require.NoError(t, err)
	}
}

// hold locks the delivery id in a transaction of its own, open until the
// test commits it (or ends), and returns it with its backend's pid.
func (r erasureRace) hold(t *testing.T, id string) (*sql.Tx, int) {
	t.Helper()
	conn, err := r.db.Conn(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	hold, err := conn.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = hold.Rollback() })
	var pid int
	require.NoError(t, hold.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid))
	_, err = hold.Exec(`SELECT 1 FROM webhook_deliveries WHERE id = $1 FOR UPDATE`, id)
	require.NoError(t, err)
	return hold, pid
}

// blockedBy waits until a backend waits for pid's, and returns its pid.
func (r erasureRace) blockedBy(t *testing.T, pid int, what string) int {
	t.Helper()
	var waiter int
	require.Eventually(t, func() bool {
		return r.db.QueryRow(`SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, pid).Scan(&waiter) == nil
	}, 20*time.Second, 5*time.Millisecond, what)
	return waiter
}

// dispatcher is a dispatcher of the race's database, its retries an hour
// apart.
func (r erasureRace) dispatcher(t *testing.T) *Dispatcher {
	t.Helper()
	sender, err := NewSender(SenderConfig{Timeout: time.Second, AllowPrivate: true})
	require.NoError(t, err)
	d, err := NewDispatcher(t.Context(), DispatcherConfig{DB: r.db, Sender: sender, Secrets: testKeys, Keep: time.Hour,
		Schedule: webhook.Schedule{Initial: time.Hour, Max: time.Hour, For: 24 * time.Hour},
		OnStale:  func(err error) { t.Errorf("stale term: %v", err) }})
	require.NoError(t, err)
	return d
}

// requireFailed requires the deliveries ids failed, with the error text.
func (r erasureRace) requireFailed(t *testing.T, ids []string, text string) {
	t.Helper()
	for _, id := range ids {
		var status, got string
		require.NoError(t, r.db.QueryRow(`SELECT status, error FROM webhook_deliveries WHERE id = $1`, id).Scan(&status, &got))
		require.Equal(t, webhook.Failed, status, id)
		require.Equal(t, text, got, id)
	}
}

// A round records its attempts, then claims the next due deliveries: two
// statements, so its locks are not taken in one id order, and an erasure
// scrubbing the same deliveries in id order can meet it in a deadlock
// (the rows a round will claim are known only inside its claim). Postgres
// then aborts one of the two: a round aborted is run again by its worker;
// an erasure aborted runs its pass again (EraseSubject answers a conflict,
// as for a write to one of the subject's streams), so it is not failed.
//
// The steps, ordered by the locks they wait for: d3 is claimed (its
// attempt is recorded by the round); dX, another customer's delivery due
// before d1, is held by a third transaction; d1, another order's of the
// customer, is due. The round records d3, then its claim waits for dX.
// The erasure takes d1 and d2 and waits for d3, which the round holds. The
// third transaction ends: the round takes dX, then waits for d1. The
// erasure waited first, so its deadlock check finds the cycle first and
// Postgres aborts it (on a machine stalled for a second between the last
// two steps the round's finds it instead, and the round is aborted).
func TestAnErasureMetInADeadlockByARoundRunsAgain(t *testing.T) {
	t.Parallel()
	r := newErasureRace(t, "d1", "d2", "d3")
	ctx := t.Context()
	tx, err := pubsub.NewTransactor(r.store)
	require.NoError(t, err)
	orders, err := command.NewOrderHandlers(tx)
	require.NoError(t, err)
	create := func(customer string) string {
		w, err := orders.Create(ctx, command.CreateOrder{CustomerID: customer, AmountCents: 500,
			Meta: event.Meta{MerchantID: r.merchant, Actor: "key:test", CorrelationID: uuid.New(), OccurredAt: time.Now()}})
		require.NoError(t, err)
		return w.Stream[0].StreamID
	}
	other := uuid.New()
	_, err = r.db.Exec(`INSERT INTO customers (id, merchant_id, name) VALUES ($1, $2, 'Bob')`, other, r.merchant)
	require.NoError(t, err)
	dX := "00000000-0000-4000-8000-000000000001" // before d1 in id order
	_, err = r.db.Exec(`INSERT INTO webhook_deliveries (id, endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version,
			status, attempts, response_status, error, next_attempt_at)
		VALUES ($1, $2, $3, $4, 'order.created', $5, 1, 'pending', 1, 500, 'the receiver said: dX', now() - interval '1 minute')`,
		dX, r.endpoint, r.merchant, uuid.New(), create(other))
	require.NoError(t, err)
	// d1 (after dX in the table too), due, of another order of the
	// customer: the head of its aggregate; d3 at version 1, d2 behind it.
	_, err = r.db.Exec(`UPDATE webhook_deliveries SET aggregate_id = $2, aggregate_version = 1, next_attempt_at = now() - interval '1 minute' WHERE id = $1`,
		r.ids[0], create(r.customer))
	require.NoError(t, err)
	_, err = r.db.Exec(`UPDATE webhook_deliveries SET aggregate_version = 1 WHERE id = $1`, r.ids[2])
	require.NoError(t, err)
	_, err = r.db.Exec(`UPDATE webhook_deliveries SET aggregate_version = 2 WHERE id = $1`, r.ids[1])
	require.NoError(t, err)

	hold, holderPID := r.hold(t, dX)

	d := r.dispatcher(t)
	rounds := make(chan error, 1)
	go func() {
		_, _, _, err := d.round(context.WithoutCancel(ctx), r.endpoint,
			[]result{{id: r.ids[2], status: webhook.Pending, wait: time.Hour, code: 500, err: "the receiver said: still d3"}}, false)
		rounds <- err
	}()
	roundPID := r.blockedBy(t, holderPID, "the round's claim waits for dX")

	x, err := ops.NewErasures(r.store, 0)
	require.NoError(t, err)
	x.Wait = func(context.Context, time.Duration) error { return nil }
	erased := make(chan error, 1)
	go func() {
		_, err := x.Erase(context.WithoutCancel(ctx), ops.ErasureRequest{By: "test", MerchantID: r.merchant,
			SubjectType: event.SubjectCustomer, SubjectID: r.customer, Confirm: r.customer})
		erased <- err
	}()
	r.blockedBy(t, roundPID, "the erasure waits for d3, which the round holds")
	require.NoError(t, hold.Commit())

	require.NoError(t, <-erased, "the erasure, run again if Postgres chose it to end the deadlock")
	if err := <-rounds; err != nil {
		require.ErrorContains(t, err, "40P01", "a round fails only as the deadlock's victim (its worker runs it again)")
	}
	var scrubbed int
	require.NoError(t, r.db.QueryRow(`SELECT count(*) FROM webhook_deliveries WHERE id = ANY ($1::uuid[]) AND error = '(erased)'`,
		r.ids).Scan(&scrubbed))
	require.Equal(t, 3, scrubbed, "every delivery of the customer's orders has its receiver's words erased")
}
