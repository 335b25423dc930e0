package migrations_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
	"hearth/migrations"
)

// Migration eventstore/010 gives idempotency records a scope and leaves the
// records from before sane: answered ones stay, as legacy records (scope
// ""); open claims and stored 412s go (their keys are free); an answer that
// shows a webhook secret becomes the problem a replay of it gets.
func TestIdempotencyScopeMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("pgx", pgtest.NewEmptyDB(t))
	require.NoError(t, err)
	defer db.Close()
	later := applyBefore(t, db, 10)
	const merchant = "00000000-0000-4000-8000-000000000001"
	const endpoint = "00000000-0000-4000-8000-0000000000e1"
	_, err = db.ExecContext(ctx, `INSERT INTO merchants (id, name) VALUES ($1, 'acme')`, merchant)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `
		INSERT INTO idempotency_keys (merchant_id, key, fingerprint, token, locked_until, status, header, body, completed_at) VALUES
			($1, 'answered', 'f', gen_random_uuid(), now(), 201, '{"Content-Type": "application/json"}', '{"id":"x"}', now()),
			($1, 'refused', 'f', gen_random_uuid(), now(), 422, '{"Content-Type": "application/problem+json"}', '{"status":422}', now()),
			($1, 'stale', 'f', gen_random_uuid(), now(), 412, '{"Content-Type": "application/problem+json"}', '{"status":412}', now()),
			($1, 'open', 'f', gen_random_uuid(), now() + interval '1 minute', NULL, NULL, NULL, NULL),
			($1, 'secret', 'f', gen_random_uuid(), now(), 201, '{"Content-Type": "application/json", "ETag": "\"1\""}',
				convert_to('{"id":"' || $2::text || '","url":"https://x.example/h","secret":"whsec_c2VjcmV0","version":1}' || E'\n', 'UTF8'), now())`,
		merchant, endpoint)
	require.NoError(t, err)

	n, err := migrations.Apply(ctx, db, migrations.EventStore)
	require.NoError(t, err)
	require.Equal(t, later, n)

	rows, err := db.QueryContext(ctx, `SELECT key, scope, status, header, body FROM idempotency_keys ORDER BY key`)
	require.NoError(t, err)
	defer rows.Close()
	type kept struct {
		scope  string
		status int
		header map[string]string
		body   []byte
	}
	got := map[string]kept{}
	for rows.Next() {
		var key string
		var k kept
		var header []byte
		require.NoError(t, rows.Scan(&key, &k.scope, &k.status, &header, &k.body))
		require.NoError(t, json.Unmarshal(header, &k.header))
		got[key] = k
	}
	require.NoError(t, rows.Err())
	require.ElementsMatch(t, []string{"answered", "refused", "secret"}, keys(got), "open claims and 412s are gone")
	for key, k := range got {
		require.Empty(t, k.scope, "%s is a legacy record", key)
	}
	require.Equal(t, `{"id":"x"}`, string(got["answered"].body))

	secret := got["secret"]
	require.Equal(t, 409, secret.status)
	require.Equal(t, map[string]string{"Content-Type": "application/problem+json", "Location": "/v1/webhook-endpoints/" + endpoint}, secret.header)
	require.NotContains(t, string(secret.body), "whsec_")
	var p map[string]any
	require.NoError(t, json.Unmarshal(secret.body, &p))
	require.Equal(t, map[string]any{"type": "/problems/secret-shown-once", "title": "Conflict", "status": float64(409),
		"detail": "this request was answered before, with the signing secret of /v1/webhook-endpoints/" + endpoint +
			", which is shown only once and not kept; to get a new secret, rotate it: POST /v1/webhook-endpoints/" + endpoint + "/rotate-secret"}, p)

	// A key now has a record per scope, and every new record names one.
	_, err = db.ExecContext(ctx, `INSERT INTO idempotency_keys (merchant_id, scope, key, fingerprint, token, locked_until)
		VALUES ($1, 'operator', 'answered', 'f', gen_random_uuid(), now())`, merchant)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO idempotency_keys (merchant_id, key, fingerprint, token, locked_until)
		VALUES ($1, 'unscoped', 'f', gen_random_uuid(), now())`, merchant)
	require.ErrorContains(t, err, "scope")
	// The claim of the version before fails: during a rolling upgrade its
	// instances answer 500 to writes with a key, and write nothing.
	_, err = db.ExecContext(ctx, `INSERT INTO idempotency_keys (merchant_id, key, fingerprint, token, locked_until)
		VALUES ($1, 'old', 'f', gen_random_uuid(), now())
		ON CONFLICT (merchant_id, key) DO UPDATE SET token = excluded.token RETURNING token`, merchant)
	require.ErrorContains(t, err, "ON CONFLICT")
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// applyBefore applies the event-store migrations numbered below version to
// db, empty, and records them as applied; it returns how many are left.
func applyBefore(t *testing.T, db *sql.DB, version int) (later int) {
	t.Helper()
	all, err := migrations.List(migrations.EventStore)
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE hearth_migrations (set_name text NOT NULL, version integer NOT NULL, name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (set_name, version))`)
	require.NoError(t, err)
	for _, m := range all {
		if m.Version >= version {
			later++
			continue
		}
		_, err := db.Exec(m.SQL)
		require.NoError(t, err, m.Name)
		_, err = db.Exec(`INSERT INTO hearth_migrations (set_name, version, name) VALUES ('eventstore', $1, $2)`, m.Version, m.Name)
		require.NoError(t, err)
	}
	return later
}
