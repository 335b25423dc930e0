package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"hearth/adapters/refdata"
	"hearth/app/access"
	"hearth/internal/pgtest"
)

// keysBundle is a fresh database and a way to run `app keys create` on it.
type keysBundle struct {
	t     *testing.T
	url   string
	db    *bun.DB
	store *refdata.Store
}

func setupKeys(t *testing.T) keysBundle {
	t.Helper()
	urls := pgtest.NewDB(t)
	db := pgtest.Open(t, urls.EventStore)
	store, err := refdata.New(db)
	require.NoError(t, err)
	return keysBundle{t: t, url: urls.EventStore, db: db, store: store}
}

// keys counts the stored keys.
func (k keysBundle) keys() int {
	k.t.Helper()
	var n int
	require.NoError(k.t, k.db.DB.QueryRowContext(k.t.Context(), `SELECT count(*) FROM api_keys`).Scan(&n))
	return n
}

// create runs `app keys create` with args and returns stdout, or the error.
func (k keysBundle) create(args ...string) (string, error) {
	var stdout, stderr syncBuffer
	err := run(k.t.Context(), append([]string{"keys", "create"}, args...),
		env(map[string]string{"DATABASE_URL": k.url}), &stdout, &stderr)
	return stdout.String(), err
}

// mustCreate creates a key and returns the secret printed alone on the
// last line of stdout.
func (k keysBundle) mustCreate(args ...string) string {
	k.t.Helper()
	out, err := k.create(args...)
	require.NoError(k.t, err)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	secret := lines[len(lines)-1]
	require.True(k.t, strings.HasPrefix(secret, "hk_"), "last line of stdout: %q", out)
	require.Equal(k.t, strings.TrimSpace(secret), secret, "the key alone")
	require.NotContains(k.t, secret, " ")
	return secret
}

func TestKeysCreate(t *testing.T) {
	t.Parallel()
	k := setupKeys(t)

	secret := k.mustCreate("--merchant", "acme", "--role", "operator")
	p, err := k.store.Authenticate(t.Context(), secret)
	require.NoError(t, err, "the printed key authenticates")
	require.Equal(t, access.Operator, p.Role)
	require.Empty(t, p.StaffID)

	second := k.mustCreate("--merchant", "acme", "--role", "admin")
	require.NotEqual(t, secret, second)
	q, err := k.store.Authenticate(t.Context(), second)
	require.NoError(t, err)
	require.Equal(t, access.Admin, q.Role)
	require.Equal(t, p.MerchantID, q.MerchantID, "a second key of the same merchant reuses the merchant")
	require.NotEqual(t, p.KeyID, q.KeyID)

	other := k.mustCreate("--merchant", "globex", "--role", "operator")
	r, err := k.store.Authenticate(t.Context(), other)
	require.NoError(t, err)
	require.NotEqual(t, p.MerchantID, r.MerchantID, "another name is another merchant")

	staffID, err := k.store.CreateStaff(t.Context(), p.MerchantID, "Wanda Worker")
	require.NoError(t, err)
	worker := k.mustCreate("--merchant", "acme", "--role", "worker", "--staff", staffID)
	w, err := k.store.Authenticate(t.Context(), worker)
	require.NoError(t, err)
	require.Equal(t, access.Worker, w.Role)
	require.Equal(t, staffID, w.StaffID)
	require.Equal(t, p.MerchantID, w.MerchantID)

	_, err = k.store.Authenticate(t.Context(), secret+"x")
	require.Error(t, err, "a key that was never printed does not authenticate")
}

func TestKeysCreateErrors(t *testing.T) {
	t.Parallel()
	k := setupKeys(t)
	acme := k.mustCreate("--merchant", "acme", "--role", "operator")
	p, err := k.store.Authenticate(t.Context(), acme)
	require.NoError(t, err)
	globex := k.mustCreate("--merchant", "globex", "--role", "operator")
	q, err := k.store.Authenticate(t.Context(), globex)
	require.NoError(t, err)
	globexStaff, err := k.store.CreateStaff(t.Context(), q.MerchantID, "Gus Globex")
	require.NoError(t, err)
	acmeStaff, err := k.store.CreateStaff(t.Context(), p.MerchantID, "Wanda Worker")
	require.NoError(t, err)

	cases := []struct {
		name     string
		args     []string
		usage    bool
		contains string
	}{
		{"worker without --staff", []string{"--merchant", "acme", "--role", "worker"}, false, "--staff"},
		{"worker with a staff id that is not a UUID", []string{"--merchant", "acme", "--role", "worker", "--staff", "wanda"}, false, "UUID"},
		{"worker with another merchant's staff", []string{"--merchant", "acme", "--role", "worker", "--staff", globexStaff}, false, globexStaff},
		{"operator with --staff", []string{"--merchant", "acme", "--role", "operator", "--staff", acmeStaff}, false, "--staff"},
		{"bogus role", []string{"--merchant", "acme", "--role", "bogus"}, true, "bogus"},
		{"no role", []string{"--merchant", "acme"}, true, "--role"},
		{"no merchant", []string{"--role", "operator"}, true, "--merchant"},
		{"blank merchant", []string{"--merchant", "  ", "--role", "operator"}, false, "merchant"},
		{"unexpected argument", []string{"--merchant", "acme", "--role", "operator", "extra"}, true, "extra"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := k.keys()
			out, err := k.create(tc.args...)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.contains)
			require.Equal(t, tc.usage, errors.As(err, new(usageError)), "usage error: %v", err)
			require.NotContains(t, out, "hk_", "no key is printed")
			require.Equal(t, before, k.keys(), "no key is stored")
		})
	}
}
