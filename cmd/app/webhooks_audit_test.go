package main

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// A webhook endpoint decides where the merchant's events go, with its
// customers' personal data, and its secret is what vouches for them: its
// create, change, secret rotation and delete are in the audit log, with
// the key that made them, the merchant and the endpoint, never the
// secret nor the URL's path or query (where receivers keep their tokens);
// a refused change records nothing.
func TestWebhookEndpointWritesAreAudited(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	const path = "/v1/webhook-endpoints"
	r := a.must(http.StatusCreated, http.MethodPost, path, a.opA, map[string]any{"url": "https://hooks.example.com/hearth?token=s3cret"})
	id, secret := r.Body["id"].(string), r.Body["secret"].(string)
	a.must(http.StatusOK, http.MethodPatch, path+"/"+id, a.opA, map[string]any{"url": "https://elsewhere.example.net:8443/in?token=s3cret", "enabled": false})
	a.must(http.StatusOK, http.MethodPost, path+"/"+id+"/rotate-secret", a.opA, map[string]any{"overlap": "1h"})
	a.must(http.StatusConflict, http.MethodPatch, path+"/"+id, a.opA, map[string]any{"description": "stale", "expected_version": 1})
	a.must(http.StatusNotFound, http.MethodDelete, path+"/"+id, a.opB, nil) // another merchant's
	a.must(http.StatusNoContent, http.MethodDelete, path+"/"+id, a.opA, nil)

	lines, entries := a.auditLog()
	actor, target := "key:"+a.opAKeyID, "webhook_endpoint/"+id
	require.Equal(t, []string{
		"webhook_endpoint.delete " + target + " " + actor,
		"webhook_endpoint.rotate_secret " + target + " " + actor,
		"webhook_endpoint.update " + target + " " + actor,
		"webhook_endpoint.create " + target + " " + actor,
	}, lines[:min(4, len(lines))], "the endpoint's writes, newest first, and nothing of the refused ones")
	for _, e := range entries[:4] {
		d := e["details"].(map[string]any)
		require.Equal(t, a.merchantA, d["merchant_id"], "%v", e)
		raw := fmt.Sprint(e)
		require.NotContains(t, raw, "s3cret", "no token of the URL: %v", e)
		require.NotContains(t, raw, secret, "never the signing secret: %v", e)
	}
	require.Equal(t, "https://hooks.example.com", entries[3]["details"].(map[string]any)["url"], "create names where the events go")
	update := entries[2]["details"].(map[string]any)
	require.Equal(t, "https://elsewhere.example.net:8443", update["url"], "%v", update)
	require.Equal(t, "https://hooks.example.com", update["url_before"], "%v", update)
	require.Equal(t, false, update["enabled"], "%v", update)
	require.Equal(t, "1h0m0s", entries[1]["details"].(map[string]any)["overlap"], "%v", entries[1])
	require.Equal(t, "https://elsewhere.example.net:8443", entries[0]["details"].(map[string]any)["url"], "%v", entries[0])

	// A create retried with its Idempotency-Key is answered from the first
	// (without the secret, shown once) and recorded once.
	retry := auth(a.opA)
	retry.Set("Idempotency-Key", "audit-once")
	body := map[string]any{"url": "https://hooks.example.com/again"}
	first, err := a.send(http.MethodPost, path, retry, body)
	require.NoError(t, err)
	again, err := a.send(http.MethodPost, path, retry, body)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, first.Status, "%s", first)
	require.Equal(t, http.StatusConflict, again.Status, "%s", again)
	lines, _ = a.auditLog()
	require.Equal(t, "webhook_endpoint.create webhook_endpoint/"+first.Body["id"].(string)+" "+actor, lines[0])
	require.NotContains(t, lines[1], "webhook_endpoint.create", "recorded once: %q", lines)
}
