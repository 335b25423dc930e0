package pubsub_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/internal/pubsubtest"
	"hearth/adapters/readmodel"
	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/order"
	"hearth/internal/database"
	"hearth/internal/pgtest"
)

// A write that has its transaction id already when it loads an aggregate,
// and an order change that commits between the two: the event feed (and
// every topic reader: projections, relay, all in transaction-id order)
// must still answer the order's events in version order, or the later
// write must fail as a conflict. Never the order's next version before the
// version it followed. Two such writes: a schedule's status change, which
// books the schedule, then loads its order; and a write whose fencing
// check reads its term FOR SHARE right after BEGIN (as the visit
// generator's did before it checked with its commit: WithCommitCheck).
func TestFeedAnswersAnAggregatesEventsInVersionOrderWhenAnOlderTransactionWritesAfterANewerOne(t *testing.T) {
	t.Parallel()
	for name, write := range map[string]func(t *testing.T, f fixture, tx command.Transactor, id string) error{
		"booked first": func(t *testing.T, f fixture, tx command.Transactor, id string) error {
			var scheduleID string
			require.NoError(t, f.ES.DB.QueryRow(`SELECT schedule_id FROM bookings WHERE order_id = $1`, id).Scan(&scheduleID))
			schedules, err := command.NewScheduleHandlers(tx)
			require.NoError(t, err)
			_, err = schedules.ChangeStatus(context.Background(), command.ChangeScheduleStatus{Meta: f.Meta(), ScheduleID: scheduleID, Status: "in_service"})
			return err
		},
		"fenced leader": func(t *testing.T, f fixture, tx command.Transactor, id string) error {
			_, err := f.ES.DB.Exec(`INSERT INTO event_store_terms (name, term) VALUES ('hearth/plans', 1)`)
			require.NoError(t, err)
			stmt, _ := readmodel.FenceSQL(readmodel.WithFence(context.Background(),
				readmodel.Fence{Lock: "hearth/plans", Term: 1, Lease: time.Minute, Function: "hearth_es_fence"}))
			other := f.CreateOrder(t)
			_, err = tx.Run(database.WithBegin(context.Background(), stmt), f.Meta(), func(ctx context.Context, s command.Session) error {
				if _, err := s.Order(ctx, other); err != nil { // the first read, with BEGIN and the check
					return err
				}
				o, err := s.Order(ctx, id)
				if err != nil {
					return err
				}
				return o.Cancel("the service plan no longer has this visit")
			})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, pgtest.NewDB(t))
			ctx := context.Background()
			id, _ := f.AssignedOrder(t)

			// Before the write loads the order (its first load of it), the
			// order's details change, in a transaction that begins (and
			// takes its id) after the write's.
			var concurrent error
			hooked := &pubsubtest.BeforeOrderLoad{Transactor: f.Tx, Only: id, Hook: func() {
				_, concurrent = f.Update(ctx, id, nil, func(o *order.Order) error {
					return o.UpdateDetails(order.Details{CustomerID: f.CustomerID, AmountCents: 700})
				})
			}}
			err := write(t, f, hooked, id)
			require.NoError(t, concurrent, "the order's details change commits")
			if err != nil {
				var conflict *apperr.ConflictError
				require.ErrorAs(t, err, &conflict, "the write may only fail as a conflict")
			}

			store, err := pubsub.NewFeed(f.ES.DB, nil)
			require.NoError(t, err)
			feed, err := query.NewFeed(store, nopWatch{})
			require.NoError(t, err)
			page, err := feed.Read(ctx, f.MerchantID, query.FeedRequest{Limit: query.FeedMaxLimit})
			require.NoError(t, err)
			last := map[string]int{}
			for _, e := range page.Events {
				require.Equal(t, last[e.AggregateID]+1, e.AggregateVersion, "%s %s: version %d follows version %d (%s)",
					e.AggregateType, e.AggregateID, e.AggregateVersion, last[e.AggregateID], e.Type)
				last[e.AggregateID] = e.AggregateVersion
			}
		})
	}
}

// nopWatch is a feed watch that never fires: the test reads without waiting.
type nopWatch struct{}

func (nopWatch) Watch(string) (<-chan struct{}, func()) { return nil, func() {} }
