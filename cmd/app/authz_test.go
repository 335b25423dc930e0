package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// A long poll of the event feed authenticated its key when it came in; a
// key revoked while it waits is answered nothing that was written after the
// revocation: the poll ends with the 401 any request of that key now gets.
func TestFeedLongPollOfARevokedKeyAnswersNothing(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	key := a.newOperatorKey("acme")
	customer := a.createCustomer(a.opA, "Ada")
	poll := a.sendAsync(http.MethodGet, "/v1/events?wait=10s", auth(key), nil)
	a.awaitWaiting(1)
	a.revokeSecret(key)
	a.createOrder(a.opA, customer, 4200) // wakes the poll with an event the revoked key may not read
	select {
	case r := <-poll:
		requireProblem(t, r, http.StatusUnauthorized, "/problems/unauthenticated")
		require.Contains(t, r.Header.Get("WWW-Authenticate"), `error="invalid_token"`)
	case <-time.After(15 * time.Second):
		t.Fatal("the long poll never answered")
	}
}
