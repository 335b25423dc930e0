package webhooks

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/command"
	"hearth/domain/uuid"
	"hearth/domain/webhook"
	"hearth/internal/pgtest"
)

// A change of an endpoint's URL checks the new URL's target (a name
// resolution, which the merchant's own DNS server may drag out) before
// the change's transaction, not inside it: that transaction locks the
// endpoint's row, which gives it a transaction id, and while it runs no
// reader below pg_snapshot_xmin (every merchant's event feed, the
// projections, the webhook fan-out) goes past it. Here the check blocks
// until released; meanwhile no session of the database holds a
// transaction id.
func TestEndpointURLCheckRunsOutsideTheTransaction(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	merchant := uuid.New()
	_, err := db.DB.ExecContext(ctx, `INSERT INTO merchants (id, name) VALUES ($1, $2)`, merchant, "m-"+merchant)
	require.NoError(t, err)
	store, err := NewStore(db.DB, testKeys)
	require.NoError(t, err)
	const slow = "https://slow-dns.example.com/hook"
	checking, release := make(chan struct{}), make(chan struct{})
	h, err := command.NewWebhooks(store, func(_ context.Context, rawURL string) error {
		if rawURL == slow {
			close(checking)
			<-release
		}
		return nil
	})
	require.NoError(t, err)
	e, err := h.CreateEndpoint(ctx, merchant, "test", webhook.Endpoint{URL: "https://example.com/hook", Enabled: true}, time.Now())
	require.NoError(t, err)

	type outcome struct {
		e   webhook.Endpoint
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		url := slow
		e, err := h.UpdateEndpoint(ctx, merchant, "test", e.ID, command.EndpointChange{URL: &url}, time.Now())
		done <- outcome{e, err}
	}()
	<-checking
	var holding []string
	rows, err := db.DB.QueryContext(ctx, `SELECT state || ': ' || coalesce(query, '') FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		holding = append(holding, s)
	}
	require.NoError(t, rows.Err())
	close(release)
	got := <-done
	require.NoError(t, got.err)
	require.Equal(t, slow, got.e.URL)
	require.Empty(t, holding, "sessions holding a transaction id while the URL's target is checked:\n%s", strings.Join(holding, "\n"))
}
