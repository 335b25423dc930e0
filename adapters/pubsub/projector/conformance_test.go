package projector_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/projector"
	"hearth/internal/database"
	"hearth/internal/pgtest"
)

// Watermill's universal Pub/Sub tests, run against Hearth's transport:
// the subscribers the pipeline runs (NotifyingSubscribers: NOTIFY wake-up,
// LockFreeOffsets), with and without a lookahead, and the watermill-sql
// publisher as Hearth configures it.
//
// The publisher: Hearth's commands publish through Store.publish, which
// queues watermill-sql's insert into the pgx batch of the command's
// transaction. The suite publishes messages of its own, outside any
// command, so it uses SQLPublisher: the same publisher and SchemaAdapter
// on the *sql.DB (the poison queue's publisher).
//
// The features are those watermill-sql's own Postgres tests use, minus
// what LockFreeOffsets gives up:
//   - ExactlyOnceDelivery: off. Without the FOR UPDATE on the consumer
//     group's row, several subscribers of one group read from the same
//     offset at once and deliver the same messages (the suite then checks
//     that nothing is lost, duplicates allowed); their acks of the row can
//     fail with a serialization error, which TestConcurrentSubscribe logs
//     at error.
//   - GuaranteedOrder holds with one subscriber per consumer group only
//     (GuaranteedOrderWithSingleSubscriber): several subscribers of one
//     group deliver concurrently, so their messages interleave.
//
// Hearth runs one subscriber per group, on the leader only, and its
// projections are idempotent (version guard), so it needs neither (README,
// "What the transport does not offer"). TestReconnect is skipped, as in
// watermill-sql's tests: it needs a command that restarts the server
// (internal/chaos restarts Postgres under the whole pipeline).
func TestWatermillConformance(t *testing.T) {
	t.Parallel()
	features := tests.Features{
		ConsumerGroups:                      true,
		ExactlyOnceDelivery:                 false,
		GuaranteedOrder:                     true,
		GuaranteedOrderWithSingleSubscriber: true,
		Persistent:                          true,
	}
	for name, lookahead := range map[string]bool{"notify": false, "notify_lookahead": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			features := features
			// The lookahead only notes what each query returns: the suite's
			// short form (fewer messages and subscribers; go test -short
			// gives it to both) covers it, and its TestContinueAfterErrors
			// takes 1 s instead of 60 (300 nacks, each resent after
			// NotifyingSubscribers' ResendInterval, 200 ms).
			features.ForceShort = lookahead
			c := newConformance(t, lookahead)
			tests.TestPubSub(t, features, func(t *testing.T) (message.Publisher, message.Subscriber) {
				return c.pubSub(t, "test")
			}, c.pubSub)
		})
	}
}

// conformance makes the suite's publishers and subscribers on one fresh
// database, with one running notifier.
type conformance struct {
	url       string
	notifier  *projector.Notifier
	log       *slog.Logger
	lookahead bool
	// mu serialises the creation of topic tables (see createTopic).
	mu sync.Mutex
}

func newConformance(t *testing.T, lookahead bool) *conformance {
	url := pgtest.NewDB(t).EventStore
	return &conformance{url: url, notifier: runNotifier(t, url), log: quietLog(), lookahead: lookahead}
}

// pubSub returns a publisher and a subscriber of group, on a pool of their
// own, as two Hearth processes would have: a subscription holds a
// connection while its message waits for an ack, and the suite leaves up
// to 50 subscribers waiting at once. The subscriber creates the tables of
// the suite's (random) topics when the suite asks it to
// (message.SubscribeInitializer).
func (c *conformance) pubSub(t *testing.T, group string) (message.Publisher, message.Subscriber) {
	db, err := database.OpenSQL(context.Background(), c.url, 10, "")
	require.NoError(t, err)
	pub, err := projector.SQLPublisher(db, c.log)
	require.NoError(t, err)
	var ahead *projector.Lookahead
	if c.lookahead {
		ahead = projector.NewLookahead() // one per router, as Projector.Run does
	}
	// serve's default POLL_INTERVAL.
	sub, err := projector.NotifyingSubscribers(projector.SubscribersConfig{DB: db, Notifier: c.notifier, Fallback: 100 * time.Millisecond,
		Lookahead: ahead, Log: c.log})(group)
	require.NoError(t, err)
	t.Cleanup(func() {
		// Some of the suite's tests leave their subscriber open.
		_ = sub.Close()
		_ = db.Close()
	})
	return pub, initializingSubscriber{Subscriber: sub, initialize: func(topic string) error { return c.createTopic(db, topic) }}
}

type initializingSubscriber struct {
	message.Subscriber
	initialize func(topic string) error
}

func (s initializingSubscriber) SubscribeInitialize(topic string) error { return s.initialize(topic) }

// topicSchema is Hearth's Schema with a bytea payload, for the suite's
// payloads that are not JSON (Hearth's envelopes are; as in watermill-sql's
// own tests). Table names and queries are Schema's.
var topicSchema = wsql.DefaultPostgreSQLSchema{GeneratePayloadType: func(string) string { return "BYTEA" }}

// createTopic creates topic's tables as Hearth's migrations do
// (migrations/eventstore 001 and 004): watermill-sql's messages and offsets
// tables, and the statement trigger that announces inserts on NOTIFY.
// Calls are serialised: concurrent CREATE TABLE IF NOT EXISTS of one table
// race.
func (c *conformance) createTopic(db *sql.DB, topic string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	queries := append(topicSchema.SchemaInitializingQueries(topic), pubsub.Offsets.SchemaInitializingQueries(topic)...)
	queries = append(queries, wsql.Query{Query: `CREATE OR REPLACE TRIGGER notify AFTER INSERT ON ` + pubsub.Schema.MessagesTable(topic) +
		` FOR EACH STATEMENT EXECUTE FUNCTION hearth_notify_topic()`})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	for _, q := range queries {
		if _, err := tx.ExecContext(ctx, q.Query, q.Args...); err != nil {
			return errors.Join(fmt.Errorf("create topic %s: %w", topic, err), tx.Rollback())
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("create topic %s: commit: %w", topic, err)
	}
	return nil
}
