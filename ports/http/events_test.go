package httpport

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app"
	"hearth/app/access"
	"hearth/app/query"
)

// emptyFeed has no events; its Watch reports each watch on watched and
// never fires.
type emptyFeed struct{ watched chan struct{} }

func (emptyFeed) Page(context.Context, string, query.FeedCursor, int) ([]query.FeedEntry, error) {
	return nil, nil
}

func (emptyFeed) Holds(context.Context, query.FeedCursor) (bool, error) { return true, nil }

func (f emptyFeed) Watch(string) (<-chan struct{}, func()) {
	f.watched <- struct{}{}
	return nil, func() {}
}

// When shutdown begins (Draining), a long poll answers at once with what it
// has, so that the server's graceful shutdown does not wait for it.
func TestEventFeedLongPollEndsWhenDraining(t *testing.T) {
	t.Parallel()
	feed := emptyFeed{watched: make(chan struct{}, 1)}
	var a app.Application
	var err error
	a.Queries.Events, err = query.NewFeed(feed, feed)
	require.NoError(t, err)
	draining := make(chan struct{})
	h, err := NewHandler(Config{App: a, APIEnabled: true, Log: slog.New(slog.DiscardHandler), FeedWait: time.Hour, Draining: draining,
		Auth: keys{"op": {KeyID: "1", MerchantID: "m", Role: access.Operator}}})
	require.NoError(t, err)

	cursor := query.FeedCursor{Transaction: 9, Position: 4}.String()
	rec := httptest.NewRecorder()
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		req := httptest.NewRequest(http.MethodGet, "/v1/events?after="+cursor, nil)
		req.Header.Set("Authorization", "Bearer op")
		h.ServeHTTP(rec, req)
	}()
	<-feed.watched // it read nothing and waits (for an hour)
	close(draining)
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll still waits after draining began")
	}
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.JSONEq(t, `{"events":[],"next_cursor":"`+cursor+`"}`, rec.Body.String())
}

// The document's types parameter lists exactly the types the feed carries.
func TestOpenAPIEventFeedTypes(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Parameters map[string]struct {
				Name   string `json:"name"`
				Schema struct {
					Items struct {
						Enum []string `json:"enum"`
					} `json:"items"`
				} `json:"schema"`
			} `json:"parameters"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(openAPI, &doc))
	p := doc.Components.Parameters["feed_types"]
	require.Equal(t, "types", p.Name)
	listed := slices.Sorted(slices.Values(p.Schema.Items.Enum))
	require.Equal(t, query.FeedTypes(), listed)
}
