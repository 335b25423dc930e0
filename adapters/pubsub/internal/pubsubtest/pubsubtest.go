// Package pubsubtest is the fixture the event store's tests and the
// projector's tests share: the store and its Transactor on a test
// database, the orders read model, and a router over the real SQL
// transport.
package pubsubtest

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/projector"
	"hearth/adapters/readmodel"
	"hearth/app/command"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
)

// Fixture is one merchant with one customer on a fresh pair of databases.
type Fixture struct {
	ES, RM     *bun.DB
	Store      *pubsub.Store
	Tx         *pubsub.Transactor
	OrderCmds  command.OrderHandlers
	Orders     *readmodel.Orders
	MerchantID string
	CustomerID string
}

// Setup opens urls and creates the merchant and the customer.
func Setup(t testing.TB, urls pgtest.URLs) Fixture {
	t.Helper()
	f := Fixture{ES: pgtest.Open(t, urls.EventStore), RM: pgtest.Open(t, urls.ReadModel)}
	var err error
	f.Store, err = pubsub.NewStore(f.ES, nil, nil)
	require.NoError(t, err)
	f.Tx, err = pubsub.NewTransactor(f.Store)
	require.NoError(t, err)
	f.OrderCmds, err = command.NewOrderHandlers(f.Tx)
	require.NoError(t, err)
	f.Orders, err = readmodel.NewOrders(f.RM)
	require.NoError(t, err)
	f.MerchantID, f.CustomerID = uuid.New(), uuid.New()
	_, err = f.ES.DB.Exec(`INSERT INTO merchants (id, name) VALUES ($1, $2)`, f.MerchantID, "m-"+f.MerchantID)
	require.NoError(t, err)
	_, err = f.ES.DB.Exec(`INSERT INTO customers (id, merchant_id, name) VALUES ($1, $2, 'Ada')`, f.CustomerID, f.MerchantID)
	require.NoError(t, err)
	return f
}

// Meta is the metadata of a command of the fixture's merchant.
func (f Fixture) Meta() event.Meta {
	return event.Meta{MerchantID: f.MerchantID, Actor: "key:test", CorrelationID: uuid.New(), OccurredAt: time.Now()}
}

// CreateOrder creates an order and returns its id.
func (f Fixture) CreateOrder(t *testing.T) string {
	t.Helper()
	w, err := f.OrderCmds.Create(context.Background(), command.CreateOrder{Meta: f.Meta(), CustomerID: f.CustomerID, AmountCents: 500})
	require.NoError(t, err)
	return w.Stream[0].StreamID
}

// Update runs fn on one order in one transaction, as the command handlers do.
func (f Fixture) Update(ctx context.Context, id string, expected *int, fn func(o *order.Order) error) (command.Written, error) {
	out, err := f.Tx.Run(ctx, f.Meta(), func(ctx context.Context, s command.Session) error {
		o, err := s.Order(ctx, id)
		if err != nil {
			return err
		}
		if expected != nil && *expected != o.Version() {
			return &apperr.ConflictError{Detail: "stale"}
		}
		return fn(o)
	})
	return out.Of(id), err
}

// Count counts the rows of table.
func (f Fixture) Count(t *testing.T, db *bun.DB, table string) int {
	t.Helper()
	var n int
	require.NoError(t, db.DB.QueryRow(`SELECT count(*) FROM `+table).Scan(&n))
	return n
}

// RunRouter runs the projections over the real SQL transport until the test
// ends.
func (f Fixture) RunRouter(t *testing.T, projections ...projector.Projection) {
	t.Helper()
	f.RunRouterWith(t, nil, projections...)
}

// RunRouterWith is RunRouter with parking (nil: none).
func (f Fixture) RunRouterWith(t *testing.T, parking *projector.Parking, projections ...projector.Projection) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	poison, err := projector.SQLPublisher(f.ES.DB, log)
	require.NoError(t, err)
	if len(projections) == 0 {
		projections = []projector.Projection{{Name: "orders", Topic: pubsub.TopicOrders, Decode: order.Decode, Apply: f.Orders.Apply}}
	}
	router, err := projector.NewRouter(projector.RouterConfig{
		Subscriber:   projector.SQLSubscribers(f.ES.DB, log, 10*time.Millisecond),
		Poison:       poison,
		Log:          log,
		RetryInitial: time.Millisecond,
		Parking:      parking,
	}, projections...)
	require.NoError(t, err)
	StartRouter(t, router)
}

// StartRouter runs router until the test ends.
func StartRouter(t *testing.T, router *message.Router) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-done:
		t.Fatalf("router stopped at once: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// Stream reads an order's events back from the store.
func (f Fixture) Stream(t *testing.T, id string) []event.Recorded {
	t.Helper()
	recs, err := f.Store.Read(context.Background(), pubsub.OrderStream, f.MerchantID, id)
	require.NoError(t, err)
	return recs
}

// AssignedOrder creates an order assigned to a new staff member tomorrow,
// and returns its id and its schedule's.
func (f Fixture) AssignedOrder(t *testing.T) (orderID, scheduleID string) {
	t.Helper()
	staff := uuid.New()
	_, err := f.ES.DB.Exec(`INSERT INTO staff (id, merchant_id, name) VALUES ($1, $2, 'Wanda')`, staff, f.MerchantID)
	require.NoError(t, err)
	orderID = f.CreateOrder(t)
	start := time.Now().Add(24 * time.Hour).Truncate(time.Hour)
	_, err = f.OrderCmds.Assign(context.Background(), command.AssignOrder{OrderTarget: command.OrderTarget{Meta: f.Meta(), OrderID: orderID},
		StaffID: staff, StartAt: start, EndAt: start.Add(time.Hour)})
	require.NoError(t, err)
	require.NoError(t, f.ES.DB.QueryRow(`SELECT schedule_id FROM bookings WHERE order_id = $1`, orderID).Scan(&scheduleID))
	return orderID, scheduleID
}

// BeforeOrderLoad is a Transactor whose sessions run Hook (once) before
// they load order Only (any order when Only is empty): another command
// commits there, as it may between two statements of a use case.
type BeforeOrderLoad struct {
	command.Transactor
	Only string
	Hook func()
	once sync.Once
}

func (b *BeforeOrderLoad) Run(ctx context.Context, meta event.Meta, fn func(ctx context.Context, s command.Session) error) (command.Outcome, error) {
	return b.Transactor.Run(ctx, meta, func(ctx context.Context, s command.Session) error {
		return fn(ctx, &hookedSession{Session: s, b: b})
	})
}

type hookedSession struct {
	command.Session
	b *BeforeOrderLoad
}

func (s *hookedSession) Order(ctx context.Context, id string) (*order.Order, error) {
	if s.b.Only == "" || id == s.b.Only {
		s.b.once.Do(s.b.Hook)
	}
	return s.Session.Order(ctx, id)
}
