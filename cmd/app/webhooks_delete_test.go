package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// A webhook endpoint's DELETE takes If-Match as its other writes do: a
// client that read the endpoint (its ETag) deletes it only while nobody
// has changed it since (another operator who pointed it at a new receiver
// meanwhile), is told 412 with the current ETag otherwise, and the
// endpoint stays. Before, any tag was 412, so a client that read the
// endpoint again and retried with its ETag was refused for ever.
func TestWebhookEndpointDeleteTakesIfMatch(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	const path = "/v1/webhook-endpoints"
	id := a.must(http.StatusCreated, http.MethodPost, path, a.opA, map[string]any{"url": "https://hooks.example.com/in"}).Body["id"].(string)
	a.must(http.StatusOK, http.MethodPatch, path+"/"+id, a.opA, map[string]any{"url": "https://elsewhere.example.com/in"})
	ifMatch := func(tag string) http.Header {
		h := auth(a.opA)
		h.Set("If-Match", tag)
		return h
	}

	stale, err := a.send(http.MethodDelete, path+"/"+id, ifMatch(`"1"`), nil)
	require.NoError(t, err)
	requireProblem(t, stale, http.StatusPreconditionFailed, "/problems/precondition-failed")
	require.Equal(t, `"2"`, stale.Header.Get("ETag"), "the 412 names the endpoint's current version")
	a.must(http.StatusOK, http.MethodGet, path+"/"+id, a.opA, nil) // still there

	current := a.must(http.StatusOK, http.MethodGet, path+"/"+id, a.opA, nil).Header.Get("ETag")
	gone, err := a.send(http.MethodDelete, path+"/"+id, ifMatch(current), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, gone.Status, "the endpoint's current ETag deletes it: %s", gone)
	a.must(http.StatusNotFound, http.MethodGet, path+"/"+id, a.opA, nil)

	again, err := a.send(http.MethodDelete, path+"/"+id, ifMatch(current), nil)
	require.NoError(t, err)
	requireProblem(t, again, http.StatusNotFound, "/problems/not-found")
}
