package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/uuid"
	"hearth/internal/pgtest"
)

// keyRow reads what api_keys holds about a key (never its hash).
func (a *api) keyRow(id string) (lastUsed, expires, revoked *time.Time) {
	a.t.Helper()
	require.NoError(a.t, a.dbs.es.DB.QueryRowContext(a.t.Context(),
		`SELECT last_used_at, expires_at, revoked_at FROM api_keys WHERE id = $1`, id).Scan(&lastUsed, &expires, &revoked))
	return lastUsed, expires, revoked
}

// auditLog is GET /admin/audit: "action target actor" per entry, newest
// first, and the entries.
func (a *api) auditLog() ([]string, []map[string]any) {
	a.t.Helper()
	r := a.must(http.StatusOK, http.MethodGet, "/admin/audit?page_size=200", a.admin, nil)
	var lines []string
	var entries []map[string]any
	for _, it := range r.Body["items"].([]any) {
		e := it.(map[string]any)
		entries = append(entries, e)
		lines = append(lines, fmt.Sprintf("%s %s %s", e["action"], e["target"], e["actor"]))
	}
	return lines, entries
}

// requireOnlySetUpAudited checks that the audit log holds only the set-up's
// keys (actor "system"): no refused request reached it.
func (a *api) requireOnlySetUpAudited() {
	a.t.Helper()
	lines, _ := a.auditLog()
	for _, l := range lines {
		require.True(a.t, strings.HasSuffix(l, " system"), "only the set-up is in the audit log: %q", l)
	}
}

// A key's life over the admin API: created (for a merchant by id or by
// name, a worker, an admin), listed, revoked (401 at once), expired (401),
// rotated with and without grace; a worker key stops when its staff member
// is deactivated; every change is in the audit log with the admin key as
// actor.
func TestKeyLifecycleAPI(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	actor := "key:" + a.adminKeyID
	works := func(key string) bool {
		r, err := a.send(http.MethodGet, "/v1/customers", auth(key), nil)
		require.NoError(t, err)
		require.Contains(t, []int{http.StatusOK, http.StatusUnauthorized}, r.Status, "%s", r)
		return r.Status == http.StatusOK
	}

	// Create: 201 with the secret, once; no Location (there is no key
	// resource to GET).
	expires := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	created := a.must(http.StatusCreated, http.MethodPost, "/admin/keys", a.admin, map[string]any{
		"role": "operator", "merchant_id": strings.ToUpper(a.merchantA), "name": "till 3", "expires_at": expires.Format(time.RFC3339)})
	require.Equal(t, "no-store", created.Header.Get("Cache-Control"))
	op := created.Body["secret"].(string)
	opID := created.Body["id"].(string)
	require.True(t, strings.HasPrefix(op, "hk_"))
	require.Equal(t, a.merchantA, created.Body["merchant_id"], "the id in canonical form")
	require.Equal(t, "acme", created.Body["merchant_name"])
	require.Equal(t, "till 3", created.Body["name"])
	require.Equal(t, expires.Format(time.RFC3339), created.Body["expires_at"])
	require.True(t, works(op))
	worker := a.must(http.StatusCreated, http.MethodPost, "/admin/keys", a.admin, map[string]any{
		"role": "worker", "merchant_id": a.merchantA, "staff_id": a.staffA}).Body["secret"].(string)
	newMerchant := a.must(http.StatusCreated, http.MethodPost, "/admin/keys", a.admin, map[string]any{"role": "operator", "merchant": "initech"})
	require.NotEqual(t, a.merchantA, newMerchant.Body["merchant_id"])
	require.Equal(t, "initech", newMerchant.Body["merchant_name"])
	admin2 := a.must(http.StatusCreated, http.MethodPost, "/admin/keys", a.admin, map[string]any{"role": "admin", "name": "second admin"})
	require.NotContains(t, admin2.Body, "merchant_id", "an admin key has no merchant")
	a.must(http.StatusOK, http.MethodGet, "/admin/keys", admin2.Body["secret"].(string), nil)

	// List: filtered by merchant, paginated, newest first, never a secret
	// or a hash.
	list := a.must(http.StatusOK, http.MethodGet, "/admin/keys?merchant_id="+a.merchantA+"&page_size=2", a.admin, nil)
	require.Equal(t, 4, intOf(list.Body["total"]), "opA, worker, till 3 and the new worker key: %s", list)
	require.Len(t, list.Body["items"], 2)
	require.Equal(t, 2, intOf(list.Body["page_size"]))
	require.NotContains(t, list.Raw, "hk_")
	require.NotContains(t, list.Raw, "hash")
	all := a.must(http.StatusOK, http.MethodGet, "/admin/keys?page_size=200", a.admin, nil)
	require.Equal(t, 8, intOf(all.Body["total"]), "%s", all)
	first := all.Body["items"].([]any)[0].(map[string]any)
	require.Equal(t, admin2.Body["id"], first["id"], "newest first")
	for _, field := range []string{"id", "role", "name", "created_at", "last_used_at", "expires_at", "revoked_at"} {
		require.Contains(t, first, field)
	}

	// Revoke: 401 at once; revoking again changes nothing.
	r := a.must(http.StatusOK, http.MethodPost, "/admin/keys/"+opID+"/revoke", a.admin, nil)
	require.NotNil(t, r.Body["revoked_at"])
	require.False(t, works(op), "a revoked key answers 401")
	requireProblem(t, a.do(http.MethodGet, "/v1/customers", op, nil), http.StatusUnauthorized, "/problems/unauthenticated")
	again := a.must(http.StatusOK, http.MethodPost, "/admin/keys/"+opID+"/revoke", a.admin, nil)
	require.Equal(t, r.Body["revoked_at"], again.Body["revoked_at"])
	a.must(http.StatusNotFound, http.MethodPost, "/admin/keys/"+uuid.New()+"/revoke", a.admin, nil)

	// Expiry: a key past its expires_at answers 401.
	require.True(t, works(a.opB))
	_, err := a.dbs.es.DB.Exec(`UPDATE api_keys SET expires_at = now() - interval '1 millisecond' WHERE key_hash = sha256($1::text::bytea)`, a.opB)
	require.NoError(t, err)
	require.False(t, works(a.opB), "an expired key answers 401")

	// A worker key stops while its staff member is inactive.
	a.must(http.StatusOK, http.MethodGet, "/v1/schedules", worker, nil)
	a.must(http.StatusOK, http.MethodPatch, "/v1/staff/"+a.staffA, a.opA, map[string]any{"active": false})
	requireProblem(t, a.do(http.MethodGet, "/v1/schedules", worker, nil), http.StatusUnauthorized, "/problems/unauthenticated")
	requireProblem(t, a.do(http.MethodGet, "/v1/schedules", a.worker, nil), http.StatusUnauthorized, "/problems/unauthenticated")
	a.must(http.StatusOK, http.MethodPatch, "/v1/staff/"+a.staffA, a.opA, map[string]any{"active": true})
	a.must(http.StatusOK, http.MethodGet, "/v1/schedules", worker, nil)

	// Rotate without grace: the old key stops at once; the new one has the
	// old one's merchant, role, name and expiry.
	till := a.must(http.StatusCreated, http.MethodPost, "/admin/keys", a.admin, map[string]any{
		"role": "operator", "merchant_id": a.merchantA, "name": "till 4", "expires_at": expires.Format(time.RFC3339)})
	tillID := till.Body["id"].(string)
	rot := a.must(http.StatusCreated, http.MethodPost, "/admin/keys/"+tillID+"/rotate", a.admin, nil)
	require.Equal(t, "no-store", rot.Header.Get("Cache-Control"))
	rotated := rot.Body["secret"].(string)
	rotatedID := rot.Body["id"].(string)
	require.NotEqual(t, tillID, rotatedID)
	for _, field := range []string{"merchant_id", "role", "name", "expires_at"} {
		require.Equal(t, till.Body[field], rot.Body[field], field)
	}
	previous := rot.Body["previous"].(map[string]any)
	require.Equal(t, tillID, previous["id"])
	require.NotNil(t, previous["revoked_at"])
	require.False(t, works(till.Body["secret"].(string)), "rotated without grace: the old key stops at once")
	require.True(t, works(rotated))

	// Rotate with grace: both work until the grace ends, then only the new.
	before := time.Now()
	rot = a.must(http.StatusCreated, http.MethodPost, "/admin/keys/"+rotatedID+"/rotate", a.admin, map[string]any{"grace": "2h"})
	newest := rot.Body["secret"].(string)
	require.True(t, works(rotated), "the old key works during the grace period")
	require.True(t, works(newest))
	_, oldExpires, oldRevoked := a.keyRow(rotatedID)
	require.Nil(t, oldRevoked)
	require.WithinRange(t, *oldExpires, before.Add(2*time.Hour-time.Second), time.Now().Add(2*time.Hour))
	_, err = a.dbs.es.DB.Exec(`UPDATE api_keys SET expires_at = now() - interval '1 millisecond' WHERE id = $1`, rotatedID)
	require.NoError(t, err) // the grace period is over
	require.False(t, works(rotated))
	require.True(t, works(newest))
	// A grace never extends a key beyond its own expiry.
	rot = a.must(http.StatusCreated, http.MethodPost, "/admin/keys/"+rot.Body["id"].(string)+"/rotate", a.admin, map[string]any{"grace": "720h"})
	require.Equal(t, expires.Format(time.RFC3339), rot.Body["previous"].(map[string]any)["expires_at"])
	requireProblem(t, a.do(http.MethodPost, "/admin/keys/"+tillID+"/rotate", a.admin, nil), http.StatusUnprocessableEntity, "/problems/rule-broken")
	requireProblem(t, a.do(http.MethodPost, "/admin/keys/"+rotatedID+"/rotate", a.admin, nil), http.StatusUnprocessableEntity, "/problems/rule-broken")
	a.must(http.StatusNotFound, http.MethodPost, "/admin/keys/"+uuid.New()+"/rotate", a.admin, nil)

	// Every change is in the audit log, newest first, with the admin key
	// as actor (the operator key for its staff member's activity); the
	// set-up's keys were created by "system".
	lines, entries := a.auditLog()
	require.Equal(t, []string{
		"key.rotate " + rot.Body["previous"].(map[string]any)["id"].(string) + " " + actor,
		"key.rotate " + rotatedID + " " + actor,
		"key.rotate " + tillID + " " + actor,
		"key.create " + tillID + " " + actor,
		// The worker key's staff member made inactive and active again
		// (above), by the merchant's operator key.
		"staff_member.activate staff_member/" + a.staffA + " key:" + a.opAKeyID,
		"staff_member.deactivate staff_member/" + a.staffA + " key:" + a.opAKeyID,
		"key.revoke " + opID + " " + actor,
		"key.revoke " + opID + " " + actor,
		"key.create " + admin2.Body["id"].(string) + " " + actor,
		"key.create " + newMerchant.Body["id"].(string) + " " + actor,
	}, lines[:10])
	require.Equal(t, true, entries[6]["details"].(map[string]any)["already_revoked"])
	require.Equal(t, "2h0m0s", entries[1]["details"].(map[string]any)["grace"])
	for _, e := range entries {
		require.NotEmpty(t, e["at"])
	}
	require.Equal(t, "system", entries[len(entries)-1]["actor"])
	page := a.must(http.StatusOK, http.MethodGet, "/admin/audit?page=2&page_size=3", a.admin, nil)
	require.Equal(t, len(entries), intOf(page.Body["total"]))
	require.Equal(t, lines[3], fmt.Sprintf("%s %s %s", page.Body["items"].([]any)[0].(map[string]any)["action"],
		page.Body["items"].([]any)[0].(map[string]any)["target"], page.Body["items"].([]any)[0].(map[string]any)["actor"]))
}

// Every input of the admin key API is checked, and each refusal names its
// field: 400 for what cannot be read, 422 for what breaks a rule. Nothing
// is created or changed by a refused request.
func TestKeyAdminAPIValidation(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	var keys int
	count := func() int {
		require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT count(*) FROM api_keys WHERE revoked_at IS NULL`).Scan(&keys))
		return keys
	}
	before := count()
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	cases := []struct {
		name         string
		method, path string
		body         any
		status       int
		field        string
	}{
		{"no role", http.MethodPost, "/admin/keys", map[string]any{"merchant_id": a.merchantA}, 422, "role"},
		{"unknown role", http.MethodPost, "/admin/keys", map[string]any{"role": "root"}, 422, "role"},
		{"operator without merchant", http.MethodPost, "/admin/keys", map[string]any{"role": "operator"}, 422, "merchant_id"},
		{"merchant id not a UUID", http.MethodPost, "/admin/keys", map[string]any{"role": "operator", "merchant_id": "acme"}, 422, "merchant_id"},
		{"unknown merchant id", http.MethodPost, "/admin/keys", map[string]any{"role": "operator", "merchant_id": uuid.New()}, 422, "merchant_id"},
		{"merchant id and name", http.MethodPost, "/admin/keys", map[string]any{"role": "operator", "merchant_id": a.merchantA, "merchant": "acme"}, 422, "merchant"},
		{"admin with a merchant", http.MethodPost, "/admin/keys", map[string]any{"role": "admin", "merchant_id": a.merchantA}, 422, "merchant_id"},
		{"admin with a merchant name", http.MethodPost, "/admin/keys", map[string]any{"role": "admin", "merchant": "acme"}, 422, "merchant"},
		{"worker without staff", http.MethodPost, "/admin/keys", map[string]any{"role": "worker", "merchant_id": a.merchantA}, 422, "staff_id"},
		{"worker with another merchant's staff", http.MethodPost, "/admin/keys", map[string]any{"role": "worker", "merchant_id": a.merchantA, "staff_id": a.staffB}, 422, "staff_id"},
		{"staff id not a UUID", http.MethodPost, "/admin/keys", map[string]any{"role": "worker", "merchant_id": a.merchantA, "staff_id": "wanda"}, 422, "staff_id"},
		{"operator with staff", http.MethodPost, "/admin/keys", map[string]any{"role": "operator", "merchant_id": a.merchantA, "staff_id": a.staffA}, 422, "staff_id"},
		{"expiry in the past", http.MethodPost, "/admin/keys", map[string]any{"role": "admin", "expires_at": past}, 422, "expires_at"},
		{"expiry not RFC 3339", http.MethodPost, "/admin/keys", map[string]any{"role": "admin", "expires_at": "tomorrow"}, 400, "expires_at"},
		{"name with NUL", http.MethodPost, "/admin/keys", map[string]any{"role": "admin", "name": "a\u0000b"}, 422, "name"},
		{"unknown field", http.MethodPost, "/admin/keys", map[string]any{"role": "admin", "secret": "hk_mine"}, 400, "secret"},
		{"role not a string", http.MethodPost, "/admin/keys", map[string]any{"role": 1}, 400, "role"},
		{"revoke: id not a UUID", http.MethodPost, "/admin/keys/nope/revoke", nil, 400, "id"},
		{"rotate: id not a UUID", http.MethodPost, "/admin/keys/nope/rotate", nil, 400, "id"},
		{"rotate: negative grace", http.MethodPost, "/admin/keys/" + a.opAKeyID + "/rotate", map[string]any{"grace": "-1h"}, 422, "grace"},
		{"rotate: grace too long", http.MethodPost, "/admin/keys/" + a.opAKeyID + "/rotate", map[string]any{"grace": "721h"}, 422, "grace"},
		{"rotate: grace not a duration", http.MethodPost, "/admin/keys/" + a.opAKeyID + "/rotate", map[string]any{"grace": "a while"}, 400, "grace"},
		{"rotate: grace a number", http.MethodPost, "/admin/keys/" + a.opAKeyID + "/rotate", map[string]any{"grace": 3600}, 400, "grace"},
		{"list: merchant id not a UUID", http.MethodGet, "/admin/keys?merchant_id=acme", nil, 400, "merchant_id"},
		{"list: page size 0", http.MethodGet, "/admin/keys?page_size=0", nil, 400, "page_size"},
		{"audit: page 0", http.MethodGet, "/admin/audit?page=0", nil, 400, "page"},
		{"audit: page size too big", http.MethodGet, "/admin/audit?page_size=201", nil, 400, "page_size"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := a.do(tc.method, tc.path, a.admin, tc.body)
			slug := map[int]string{400: "/problems/malformed-request", 422: "/problems/validation-failed"}[tc.status]
			if tc.field == "id" {
				slug = "/problems/invalid-id"
			}
			requireProblem(t, r, tc.status, slug)
			require.Equal(t, []string{tc.field}, problemFields(r), "%s", r)
			require.NotContains(t, r.Raw, "hk_")
		})
	}
	require.Equal(t, before, count(), "nothing was created or revoked")
	a.requireOnlySetUpAudited()
}

// Platform administration is its own principal: an admin key can do
// nothing under /v1, and no merchant key (operator or worker) can reach
// /admin; every operation the document lists is tried.
func TestAdminSeparation(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	r, err := a.client.Get(a.base + "/openapi.json")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(r.Body).Decode(&doc))
	require.NoError(t, r.Body.Close())
	param := strings.NewReplacer("{id}", uuid.New(), "{projection}", "orders")
	var v1, admin int
	before := a.events("")
	for path, item := range doc.Paths {
		for method := range item {
			method = strings.ToUpper(method)
			if !slices.Contains([]string{"GET", "POST", "PUT", "PATCH", "DELETE"}, method) {
				continue
			}
			url := param.Replace(path)
			var body any
			if method != http.MethodGet && method != http.MethodDelete {
				body = map[string]any{}
			}
			switch {
			case strings.HasPrefix(path, "/v1/"):
				v1++
				requireProblem(t, a.do(method, url, a.admin, body), http.StatusForbidden, "/problems/forbidden")
			case strings.HasPrefix(path, "/admin/"):
				admin++
				for _, key := range []string{a.opA, a.worker} {
					requireProblem(t, a.do(method, url, key, body), http.StatusForbidden, "/problems/forbidden")
				}
			}
		}
	}
	require.Greater(t, v1, 25)
	require.GreaterOrEqual(t, admin, 14)
	require.Equal(t, before, a.events(""), "no refused request wrote an event")
	a.requireOnlySetUpAudited()
}

// last_used_at is written in batches: requests only note the use in
// memory; one flush writes every key used since, in one statement; a
// failed flush keeps the uses for the next.
func TestKeyLastUsedFlushedInBatches(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	// Uses noted during the set-up are not this test's.
	_, err := a.w.refdata.FlushUses(ctx)
	require.NoError(t, err)
	_, err = a.dbs.es.DB.Exec(`UPDATE api_keys SET last_used_at = NULL`)
	require.NoError(t, err)
	var opB string
	require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT id FROM api_keys WHERE merchant_id = $1`, a.merchantB).Scan(&opB))

	start := time.Now()
	for range 3 {
		a.must(http.StatusOK, http.MethodGet, "/v1/customers", a.opA, nil)
		a.must(http.StatusOK, http.MethodGet, "/v1/customers", a.opB, nil)
	}
	a.must(http.StatusForbidden, http.MethodGet, "/admin/keys", a.opA, nil) // used, if refused
	a.must(http.StatusUnauthorized, http.MethodGet, "/v1/customers", "hk_unknown", nil)
	lastUsed, _, _ := a.keyRow(a.opAKeyID)
	require.Nil(t, lastUsed, "a request writes nothing")

	n, err := a.w.refdata.FlushUses(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n, "one flush writes both keys used")
	lastUsed, _, _ = a.keyRow(a.opAKeyID)
	require.NotNil(t, lastUsed)
	require.WithinRange(t, *lastUsed, start.Add(-time.Millisecond), time.Now())
	lastB, _, _ := a.keyRow(opB)
	require.NotNil(t, lastB)
	lastAdmin, _, _ := a.keyRow(a.adminKeyID)
	require.Nil(t, lastAdmin, "an unused key keeps no last use")
	n, err = a.w.refdata.FlushUses(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing new to flush")

	// The admin API shows it.
	list := a.must(http.StatusOK, http.MethodGet, "/admin/keys?merchant_id="+a.merchantB, a.admin, nil)
	require.Equal(t, lastB.UTC().Format(time.RFC3339Nano), list.Body["items"].([]any)[0].(map[string]any)["last_used_at"])

	// A failed flush loses nothing: the next one writes the uses.
	a.must(http.StatusOK, http.MethodGet, "/admin/keys", a.admin, nil)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = a.w.refdata.FlushUses(cancelled)
	require.Error(t, err)
	n, err = a.w.refdata.FlushUses(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the admin key's uses, kept")
	lastAdmin, _, _ = a.keyRow(a.adminKeyID)
	require.NotNil(t, lastAdmin)
}

// Parked replays and skips, over HTTP and the CLI, are in the audit log
// with who did them; so are rebuilds started and cancelled over HTTP, and
// started on the command line.
//
// Not parallel: the failing handler retries inside its subscriber's
// transaction (architecture.md).
func TestAdminAuditOfOperations(t *testing.T) {
	a := setup(t, pgtest.NewDB(t))
	actor := "key:" + a.adminKeyID
	c := a.createCustomer(a.opA, "Ada")
	x, y := a.createOrder(a.opA, c, 100), a.createOrder(a.opA, c, 200)
	a.awaitOrder(a.opA, x, 1)
	a.awaitOrder(a.opA, y, 1)
	_, err := a.dbs.rm.DB.Exec(fmt.Sprintf(`ALTER TABLE orders ADD CONSTRAINT test_cause CHECK (id NOT IN ('%s', '%s') OR status = 'pending')`, x, y))
	require.NoError(t, err)
	for _, id := range []string{x, y} {
		a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+id+"/status", a.opA, map[string]any{"status": "confirmed"})
	}
	require.Eventually(t, func() bool {
		r, err := a.send(http.MethodGet, "/admin/parked", auth(a.admin), nil)
		return err == nil && r.Status == http.StatusOK && intOf(r.Body["total"]) == 2
	}, 20*time.Second, 10*time.Millisecond)

	a.must(http.StatusOK, http.MethodPost, "/admin/parked/orders/"+x+"/replay", a.admin, nil) // still parked
	out, err := cli(t.Context(), a.urls(), "parked", "replay", "orders", x, "--by", "ops:bob")
	require.Error(t, err, out)
	a.must(http.StatusOK, http.MethodPost, "/admin/parked/orders/"+x+"/skip", a.admin, map[string]any{"reason": "bad data"})
	out, err = cli(t.Context(), a.urls(), "parked", "skip", "orders", y, "--reason", "bad too")
	require.NoError(t, err, out)
	_, err = cli(t.Context(), a.urls(), "parked", "replay", "--all", "--by", "ops:\x00")
	require.ErrorAs(t, err, new(usageError))

	lines, entries := a.auditLog()
	require.Equal(t, []string{
		"parked.skip orders/" + y + " cli:tester",
		"parked.skip orders/" + x + " " + actor,
		"parked.replay orders/" + x + " ops:bob",
		"parked.replay orders/" + x + " " + actor,
	}, lines[:4])
	require.Equal(t, "bad data", entries[1]["details"].(map[string]any)["reason"])
	require.Equal(t, true, entries[1]["details"].(map[string]any)["unparked"])
	require.Equal(t, false, entries[3]["details"].(map[string]any)["unparked"])

	// Rebuilds: over HTTP (start, cancel) and on the command line. The
	// rebuild cannot swap its table in while the read model's table is
	// held (even a share lock stops it), so it is still running when the
	// cancel comes: a rebuild of a few rows may otherwise finish first.
	hold, err := a.dbs.rm.DB.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer hold.Rollback() //nolint:errcheck // rolled back below; this only covers a failed assertion
	_, err = hold.Exec(`LOCK TABLE schedules IN ACCESS SHARE MODE`)
	require.NoError(t, err)
	a.must(http.StatusAccepted, http.MethodPost, "/admin/rebuilds/schedules", a.admin, nil)
	a.must(http.StatusOK, http.MethodDelete, "/admin/rebuilds/schedules", a.admin, nil)
	require.NoError(t, hold.Rollback())
	out, err = cli(t.Context(), a.urls(), "rebuild", "service_requests", "--by", "ops:carol")
	require.NoError(t, err, out)
	_, err = cli(t.Context(), a.urls(), "rebuild", "nope")
	require.ErrorAs(t, err, new(usageError))
	lines, _ = a.auditLog()
	require.Equal(t, []string{
		"rebuild.start service_requests ops:carol",
		"rebuild.cancel schedules " + actor,
		"rebuild.start schedules " + actor,
	}, lines[:3])

	// The CLI lists the same log.
	out, err = cli(t.Context(), a.urls(), "audit", "list")
	require.NoError(t, err)
	require.Contains(t, out, "rebuild.start")
	require.Contains(t, out, "parked.skip")
	require.Contains(t, out, "ops:bob")
}

// A key rotated with a grace period works until the grace ends: its
// expiry is then the grace's end, which a key made from it would copy. It
// is not rotated again (422 key.rotated, naming the key that replaced it);
// that key is, and keeps the expiry of the first.
func TestRotatingAKeyInItsGraceIsRefused(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	created := a.must(http.StatusCreated, http.MethodPost, "/admin/keys", a.admin, map[string]any{
		"role": "operator", "merchant_id": a.merchantA, "name": "till 9"})
	id := created.Body["id"].(string)
	require.Nil(t, created.Body["expires_at"], "a key without expiry")

	first := a.must(http.StatusCreated, http.MethodPost, "/admin/keys/"+id+"/rotate", a.admin, map[string]any{"grace": "2h"})
	require.Nil(t, first.Body["expires_at"], "the new key has the old key's expiry: none")
	newID := first.Body["id"].(string)

	again := a.do(http.MethodPost, "/admin/keys/"+id+"/rotate", a.admin, map[string]any{"grace": "2h"})
	requireProblem(t, again, http.StatusUnprocessableEntity, "/problems/rule-broken")
	require.Equal(t, "key.rotated", again.Body["rule"])
	require.Contains(t, again.Body["detail"], newID)

	second := a.must(http.StatusCreated, http.MethodPost, "/admin/keys/"+newID+"/rotate", a.admin, map[string]any{"grace": "2h"})
	require.Nil(t, second.Body["expires_at"], "rotating the newest key keeps the expiry: none")
}
