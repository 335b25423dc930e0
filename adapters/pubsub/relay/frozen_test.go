package relay_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/internal/database"
	"hearth/internal/harness"
	"hearth/internal/pgtest"
	"hearth/migrations"
)

// With the read model on a server of its own, the relay's position lives
// on a server its leadership does not watch (the lock is the event
// store's). When that server goes silent (its machine paused: its kernel
// still acknowledges, so no TCP timeout fires), each of the relay's calls
// to it must end within a bound of its own, fail and be retried, rather
// than wait for as long as the server is frozen, the relay's term going
// on, holding the lock, and relaying nothing. Once the server answers
// again, the relay goes on.
func TestRelayLeavesAFrozenReadModel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := pgtest.StartCluster(t)
	require.NoError(t, database.CreateDatabase(ctx, cluster.URL("postgres"), "readmodel"))
	rm, err := database.Open(ctx, cluster.URL("readmodel"), 1)
	require.NoError(t, err)
	_, err = migrations.Apply(ctx, rm.DB, migrations.ReadModel)
	require.NoError(t, err)
	require.NoError(t, rm.Close())
	f := setup(t, pgtest.URLs{EventStore: pgtest.NewSplitDBs(t).EventStore, ReadModel: cluster.URL("readmodel")})

	logs := &harness.SyncBuffer{}
	cfg := f.config()
	cfg.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	in := f.startInstance(t, "a", cfg)
	// A busy relay: it records a position after every page, so its
	// connection to the read model is reused within pgx's second and not
	// checked first (the event store takes the writes on through the
	// freeze).
	w := f.write(200)
	require.Eventually(t, func() bool { return f.streamCount() >= 20 }, 30*time.Second, 5*time.Millisecond)

	thaw, err := cluster.Freeze()
	require.NoError(t, err)
	t.Cleanup(thaw)
	// The bound: a call's own deadline, with a wide margin for a loaded
	// machine; a call that waits on the frozen server never fails.
	failed := func(topic string) func() bool {
		return func() bool {
			for line := range strings.Lines(logs.String()) {
				if strings.Contains(line, `msg="relay operation failed; retrying"`) && strings.Contains(line, " topic="+topic+" ") {
					return true
				}
			}
			return false
		}
	}
	for _, topic := range []string{pubsub.TopicOrders, pubsub.TopicServiceRequests} {
		require.Eventually(t, failed(topic), time.Minute, 10*time.Millisecond,
			"the relay's call to the frozen read model for %s fails and is retried", topic)
	}
	require.True(t, in.leads())

	thaw()
	w.wait(t)
	f.requireAllRelayed(t)
}
