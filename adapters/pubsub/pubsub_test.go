package pubsub_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/internal/pubsubtest"
	"hearth/adapters/vault"
	"hearth/app/command"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/uuid"
	"hearth/internal/keyring"
	"hearth/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// fixture is the shared fixture (pubsubtest.Fixture), extended by the flows.
type fixture struct{ pubsubtest.Fixture }

func setup(t *testing.T, urls pgtest.URLs) fixture { return fixture{pubsubtest.Setup(t, urls)} }

// Guarantee 1: a command that fails publishes nothing, even after some of
// its events were written and published inside the transaction.
func TestRolledBackCommandPublishesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	taken := f.CreateOrder(t)
	fresh, err := order.New(order.NewOrder{ID: uuid.New(), CustomerID: f.CustomerID})
	require.NoError(t, err)
	clashing, err := order.New(order.NewOrder{ID: taken, CustomerID: f.CustomerID})
	require.NoError(t, err)
	// fresh is appended and published first; clashing then fails, as its
	// version 1 exists already.
	_, err = f.Tx.Run(context.Background(), f.Meta(), func(ctx context.Context, s command.Session) error {
		s.AddOrder(fresh)
		s.AddOrder(clashing)
		return nil
	})
	var conflict *apperr.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, 1, f.Count(t, f.ES, "events"), "only the earlier command's event")
	require.Equal(t, 1, f.Count(t, f.ES, "watermill_orders"))
	_, err = f.Store.Read(context.Background(), pubsub.OrderStream, f.MerchantID, fresh.ID())
	require.ErrorIs(t, err, apperr.ErrNotFound)

	// A decision that fails inside Update appends nothing either.
	injected := errors.New("injected failure after the decision")
	_, err = f.Update(context.Background(), taken, nil, func(o *order.Order) error {
		require.NoError(t, o.ChangeStatus(order.StatusConfirmed, time.Now()))
		return injected
	})
	require.ErrorIs(t, err, injected)
	require.Equal(t, 1, f.Count(t, f.ES, "events"))
	require.Equal(t, 1, f.Count(t, f.ES, "watermill_orders"), "the committed command is published, the failed one is not")
}

// Guarantee 2: of concurrent commands that read the same version of one
// order, exactly one wins and the others get a conflict.
func TestConcurrentCommandsOneWins(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	id := f.CreateOrder(t)
	const writers = 8
	var loaded sync.WaitGroup
	loaded.Add(writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			v := 1
			_, errs[i] = f.Update(context.Background(), id, &v, func(o *order.Order) error {
				loaded.Done()
				loaded.Wait() // every writer has read version 1 before any appends
				return o.UpdateDetails(order.Details{CustomerID: f.CustomerID, AmountCents: int64(1000 + i)})
			})
		})
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		if err == nil {
			wins++
			continue
		}
		var conflict *apperr.ConflictError
		require.ErrorAs(t, err, &conflict)
	}
	require.Equal(t, 1, wins)
	require.Len(t, f.Stream(t, id), 2)

	// A stale expected version is a conflict before anything is decided.
	stale := 1
	_, err := f.Update(context.Background(), id, &stale, func(o *order.Order) error {
		t.Fatal("must not decide on a stale version")
		return nil
	})
	require.ErrorAs(t, err, new(*apperr.ConflictError))
}

func TestLoadHidesOtherMerchantsStreams(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	id := f.CreateOrder(t)
	other := f.Meta()
	other.MerchantID = uuid.New()
	_, err := f.Tx.Run(context.Background(), other, func(ctx context.Context, s command.Session) error {
		_, err := s.Order(ctx, id)
		return err
	})
	require.ErrorIs(t, err, apperr.ErrNotFound)
}

// RequireCustomer's check runs with the commit's first batch: a customer
// the merchant does not have (unknown, or another merchant's) fails the
// command with command.NoCustomer, writes nothing and makes no data key
// (with a vault, the check goes before the key's insert), and the
// connection goes on serving; a known one commits, its name in the
// outcome.
func TestRequireCustomerChecksWithTheCommit(t *testing.T) {
	t.Parallel()
	for _, sealing := range []bool{false, true} {
		t.Run(map[bool]string{false: "clear", true: "sealing"}[sealing], func(t *testing.T) {
			t.Parallel()
			f := setup(t, pgtest.NewDB(t))
			tx := f.Tx
			if sealing {
				ring, err := keyring.Parse("k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
				require.NoError(t, err)
				v, err := vault.New(f.ES.DB, ring)
				require.NoError(t, err)
				store, err := pubsub.NewStore(f.ES, nil, v)
				require.NoError(t, err)
				tx, err = pubsub.NewTransactor(store)
				require.NoError(t, err)
			}
			create := func(meta event.Meta, customerID string) (command.Outcome, error) {
				o, err := order.New(order.NewOrder{ID: uuid.New(), CustomerID: customerID, Notes: "ring twice"})
				require.NoError(t, err)
				return tx.Run(context.Background(), meta, func(ctx context.Context, s command.Session) error {
					s.RequireCustomer(customerID)
					s.AddOrder(o)
					return nil
				})
			}
			foreign := f.Meta()
			foreign.MerchantID = uuid.New()
			for name, tc := range map[string]struct {
				meta     event.Meta
				customer string
			}{"unknown customer": {f.Meta(), uuid.New()}, "another merchant's customer": {foreign, f.CustomerID}} {
				_, err := create(tc.meta, tc.customer)
				var invalid *apperr.ValidationError
				require.ErrorAs(t, err, &invalid, name)
				require.Equal(t, command.NoCustomer(tc.customer), invalid, name)
				require.Zero(t, f.Count(t, f.ES, "events"), name)
				require.Zero(t, f.Count(t, f.ES, "watermill_orders"), name)
				require.Zero(t, f.Count(t, f.ES, "data_keys"), name)
			}
			out, err := create(f.Meta(), f.CustomerID)
			require.NoError(t, err)
			require.Equal(t, 1, f.Count(t, f.ES, "events"))
			require.Equal(t, 1, f.Count(t, f.ES, "watermill_orders"))
			require.Equal(t, "Ada", out.Names[f.CustomerID])
			if sealing {
				require.Equal(t, 1, f.Count(t, f.ES, "data_keys"))
			}
		})
	}
}
