package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"hearth/adapters/vault"
	"hearth/app/access"
	"hearth/domain/apperr"
	"hearth/domain/uuid"
	"hearth/internal/keyring"
	"hearth/internal/pgtest"
	"hearth/internal/refdata"
	httpport "hearth/ports/http"
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
	return k.run(append([]string{"keys", "create"}, args...)...)
}

// run runs the binary's command line args (as user "tester") and returns
// stdout, or the error.
func (k keysBundle) run(args ...string) (string, error) {
	var stdout, stderr syncBuffer
	err := run(k.t.Context(), args, env(map[string]string{"DATABASE_URL": k.url, "USER": "tester"}), &stdout, &stderr)
	return stdout.String(), err
}

// lastLine is the last line of out.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	return lines[len(lines)-1]
}

// mustCreate creates a key and returns the secret printed alone on the
// last line of stdout.
func (k keysBundle) mustCreate(args ...string) string {
	k.t.Helper()
	out, err := k.create(args...)
	require.NoError(k.t, err)
	secret := lastLine(out)
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

	second := k.mustCreate("--merchant", "acme", "--role", "operator")
	require.NotEqual(t, secret, second)
	q, err := k.store.Authenticate(t.Context(), second)
	require.NoError(t, err)
	require.Equal(t, p.MerchantID, q.MerchantID, "a second key of the same merchant reuses the merchant")
	require.NotEqual(t, p.KeyID, q.KeyID)

	admin := k.mustCreate("--role", "admin")
	ad, err := k.store.Authenticate(t.Context(), admin)
	require.NoError(t, err)
	require.Equal(t, access.Admin, ad.Role)
	require.Empty(t, ad.MerchantID, "an admin key is a platform key: no merchant")

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
	inactiveStaff, err := k.store.CreateStaff(t.Context(), p.MerchantID, "Ian Inactive")
	require.NoError(t, err)
	_, err = k.db.DB.ExecContext(t.Context(), `UPDATE staff SET active = false WHERE id = $1`, inactiveStaff)
	require.NoError(t, err)

	cases := []struct {
		name     string
		args     []string
		usage    bool
		contains string
	}{
		{"worker without --staff", []string{"--merchant", "acme", "--role", "worker"}, true, "--staff: is required"},
		{"worker with a staff id that is not a UUID", []string{"--merchant", "acme", "--role", "worker", "--staff", "wanda"}, true, "--staff: must be a UUID"},
		{"worker with another merchant's staff", []string{"--merchant", "acme", "--role", "worker", "--staff", globexStaff}, false, globexStaff},
		{"worker with an inactive staff member", []string{"--merchant", "acme", "--role", "worker", "--staff", inactiveStaff}, false, "inactive"},
		{"operator with --staff", []string{"--merchant", "acme", "--role", "operator", "--staff", acmeStaff}, true, "--staff"},
		{"bogus role", []string{"--merchant", "acme", "--role", "bogus"}, true, "bogus"},
		{"no role", []string{"--merchant", "acme"}, true, "--role"},
		{"no merchant", []string{"--role", "operator"}, true, "--merchant"},
		{"blank merchant", []string{"--merchant", "  ", "--role", "operator"}, true, "--merchant"},
		// A name that differs from an existing merchant's only in case is a
		// slip, not a new tenant: the key would work for an empty merchant.
		{"a merchant named like another but for case", []string{"--merchant", "ACME", "--role", "operator"}, false, `merchant "acme" exists`},
		{"admin with a merchant", []string{"--merchant", "acme", "--role", "admin"}, true, "--merchant: an admin key belongs to no merchant"},
		{"unexpected argument", []string{"--merchant", "acme", "--role", "operator", "extra"}, true, "extra"},
		{"expiry not a duration", []string{"--role", "admin", "--expires-in", "soon"}, true, "--expires-in must be a duration"},
		{"negative expiry", []string{"--role", "admin", "--expires-in", "-1h"}, true, "--expires-in must be positive"},
		{"zero expiry", []string{"--role", "admin", "--expires-in", "0s"}, true, "--expires-in must be positive"},
		{"expiry in the past", []string{"--role", "admin", "--expires-at", "2020-01-01T00:00:00Z"}, true, "--expires-at: must be in the future"},
		{"expiry not RFC 3339", []string{"--role", "admin", "--expires-at", "tomorrow"}, true, "--expires-at must be an RFC 3339 time"},
		{"two expiries", []string{"--role", "admin", "--expires-in", "1h", "--expires-at", "2099-01-01T00:00:00Z"}, true, "not both"},
		{"name with a control character", []string{"--role", "admin", "--name", "a\x00b"}, true, "--name: must not contain control characters"},
		{"name too long", []string{"--role", "admin", "--name", strings.Repeat("n", 201)}, true, "--name: must be at most 200 bytes"},
		{"blank --by", []string{"--role", "admin", "--by", " "}, true, "--by: is required"},
		{"a flag of another subcommand", []string{"--role", "admin", "--grace", "1h"}, true, "grace"},
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

// A merchant name that differs from an existing merchant's only in its
// Unicode form is the same slip as one differing only in case: "Café"
// typed on one keyboard is U+00E9, pasted from another text e and a
// combining acute (NFD), and looks the same; a fullwidth or no-break space
// form looks the same too. Each would make a second, empty merchant whose
// key works and shows nothing of the first's.
func TestKeysCreateRefusesAMerchantNamedLikeAnotherButForItsUnicodeForm(t *testing.T) {
	t.Parallel()
	k := setupKeys(t)
	first := k.mustCreate("--merchant", "Café Crème", "--role", "operator")
	p, err := k.store.Authenticate(t.Context(), first)
	require.NoError(t, err)
	for name, like := range map[string]string{
		"decomposed":     "Café Crème",
		"fullwidth":      "Ｃａｆé Crème",
		"no-break space": "Café Crème",
	} {
		before := k.keys()
		out, err := k.create("--merchant", like, "--role", "operator")
		require.Error(t, err, "%s: a key for a new merchant %q beside %q", name, like, "Café Crème")
		require.Contains(t, err.Error(), `merchant "Café Crème" exists`, name)
		require.NotContains(t, out, "hk_", name)
		require.Equal(t, before, k.keys(), "%s: no key is stored", name)
	}
	again := k.mustCreate("--merchant", "Café Crème", "--role", "operator")
	q, err := k.store.Authenticate(t.Context(), again)
	require.NoError(t, err)
	require.Equal(t, p.MerchantID, q.MerchantID, "the very name is the same merchant")
}

// `app keys list|revoke|rotate` and `app audit list`: a key's whole life
// on the command line, each change in the audit log.
func TestKeysLifecycleCLI(t *testing.T) {
	t.Parallel()
	k := setupKeys(t)
	ctx := t.Context()
	before := time.Now().Add(-time.Millisecond) // Postgres keeps microseconds
	first := k.mustCreate("--merchant", "acme", "--role", "operator", "--name", "ci deploy", "--expires-in", "720h", "--by", "ops:ada")
	p, err := k.store.Authenticate(ctx, first)
	require.NoError(t, err)
	require.WithinRange(t, p.ExpiresAt, before.Add(720*time.Hour), time.Now().Add(720*time.Hour),
		"the lookup says when the key expires: the key cache keeps it no longer")
	k.mustCreate("--role", "admin", "--name", "platform")

	// list: every key, never a secret or a hash.
	out, err := k.run("keys", "list")
	require.NoError(t, err)
	require.Contains(t, out, p.KeyID)
	require.Contains(t, out, "ci deploy")
	require.Contains(t, out, "2 keys")
	require.NotContains(t, out, "hk_")
	sum := sha256.Sum256([]byte(first))
	require.NotContains(t, out, hex.EncodeToString(sum[:]))
	listed := func(args ...string) []httpport.KeyBody {
		t.Helper()
		out, err := k.run(append([]string{"keys", "list", "--json"}, args...)...)
		require.NoError(t, err)
		var keys []httpport.KeyBody
		require.NoError(t, json.Unmarshal([]byte(out), &keys))
		return keys
	}
	acme := listed("--merchant", "acme")
	require.Len(t, acme, 1)
	require.Equal(t, p.KeyID, acme[0].ID)
	require.Equal(t, "acme", acme[0].MerchantName)
	require.Equal(t, "ci deploy", acme[0].Name)
	require.NotNil(t, acme[0].ExpiresAt)
	require.WithinRange(t, *acme[0].ExpiresAt, before.Add(720*time.Hour), time.Now().Add(720*time.Hour))
	require.Nil(t, acme[0].LastUsedAt)
	require.Len(t, listed(), 2)
	_, err = k.run("keys", "list", "--merchant", "nope")
	require.ErrorContains(t, err, `no merchant named "nope"`)
	require.False(t, errors.As(err, new(usageError)))

	// rotate without grace: the old key stops at once, the new one is like it.
	out, err = k.run("keys", "rotate", p.KeyID)
	require.NoError(t, err)
	require.Contains(t, out, "revoked now")
	second := lastLine(out)
	require.True(t, strings.HasPrefix(second, "hk_"), out)
	_, err = k.store.Authenticate(ctx, first)
	require.ErrorIs(t, err, apperr.ErrNotFound, "the rotated key stops at once")
	q, err := k.store.Authenticate(ctx, second)
	require.NoError(t, err)
	require.Equal(t, p.MerchantID, q.MerchantID)
	require.Equal(t, p.Role, q.Role)
	acme = listed("--merchant", "acme")
	require.Len(t, acme, 2)
	require.Equal(t, q.KeyID, acme[0].ID, "newest first")
	require.Equal(t, "ci deploy", acme[0].Name, "the name is copied")
	require.Equal(t, acme[1].ExpiresAt, acme[0].ExpiresAt, "the expiry is copied")

	// rotate with grace: both work until the grace ends.
	out, err = k.run("keys", "rotate", q.KeyID, "--grace", "1h", "--by", "ops:bob")
	require.NoError(t, err)
	require.Contains(t, out, "works until")
	third := lastLine(out)
	_, err = k.store.Authenticate(ctx, second)
	require.NoError(t, err, "the old key works during the grace period")
	r, err := k.store.Authenticate(ctx, third)
	require.NoError(t, err)
	acme = listed("--merchant", "acme")
	require.Equal(t, q.KeyID, acme[1].ID)
	require.Nil(t, acme[1].RevokedAt)
	require.WithinRange(t, *acme[1].ExpiresAt, before.Add(time.Hour), time.Now().Add(time.Hour))
	_, err = k.db.DB.ExecContext(ctx, `UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1`, q.KeyID)
	require.NoError(t, err)
	_, err = k.store.Authenticate(ctx, second)
	require.ErrorIs(t, err, apperr.ErrNotFound, "an expired key stops")

	// revoke.
	out, err = k.run("keys", "revoke", r.KeyID)
	require.NoError(t, err)
	require.Contains(t, out, "revoked at")
	_, err = k.store.Authenticate(ctx, third)
	require.ErrorIs(t, err, apperr.ErrNotFound, "a revoked key stops")

	for _, tc := range []struct {
		args     []string
		usage    bool
		contains string
	}{
		{[]string{"keys", "revoke"}, true, "name one key"},
		{[]string{"keys", "revoke", "abc"}, true, "ID must be a key's id, a UUID"},
		{[]string{"keys", "revoke", uuid.New()}, false, "no key"},
		{[]string{"keys", "rotate", r.KeyID}, false, "key.revoked"},
		{[]string{"keys", "rotate", q.KeyID}, false, "key.expired"},
		{[]string{"keys", "rotate", r.KeyID, "--grace", "-1h"}, true, "--grace: must not be negative"},
		{[]string{"keys", "rotate", r.KeyID, "--grace", "1000h"}, true, "--grace: must be at most 720h"},
		{[]string{"keys", "rotate", r.KeyID, "--grace", "soon"}, true, "--grace must be a duration"},
		{[]string{"keys", "list", "extra"}, true, "extra"},
		{[]string{"keys", "delete"}, true, "create, list, revoke, rotate"},
		{[]string{"audit", "list", "--limit", "0"}, true, "--limit must be from 1 to 1000"},
	} {
		out, err := k.run(tc.args...)
		require.ErrorContains(t, err, tc.contains, "%q", tc.args)
		require.Equal(t, tc.usage, errors.As(err, new(usageError)), "%q: usage error: %v", tc.args, err)
		require.NotContains(t, out, "hk_")
	}

	// The audit log, newest first.
	out, err = k.run("audit", "list", "--json")
	require.NoError(t, err)
	var entries []httpport.AuditEntryBody
	require.NoError(t, json.Unmarshal([]byte(out), &entries))
	got := make([]string, len(entries))
	for i, e := range entries {
		got[i] = e.Action + " " + e.Target + " " + e.Actor
	}
	require.Equal(t, []string{
		"key.revoke " + r.KeyID + " cli:tester",
		"key.rotate " + q.KeyID + " ops:bob",
		"key.rotate " + p.KeyID + " cli:tester",
		"key.create " + entries[3].Target + " cli:tester",
		"key.create " + p.KeyID + " ops:ada",
	}, got)
	require.Equal(t, r.KeyID, entries[1].Details["new_key_id"])
	require.Equal(t, "1h0m0s", entries[1].Details["grace"])
	require.Equal(t, "admin", entries[3].Details["role"])
	out, err = k.run("audit", "list", "--limit", "2")
	require.NoError(t, err)
	require.Contains(t, out, "key.revoke")
	require.Contains(t, out, "2 of 5 entries")
}

// make run's banner says which database the operator's commands must be
// pointed at, and with which master key, and those command lines work as
// printed: the commands that read events need the throwaway key.
func TestDevBannerNamesTheDatabaseAndTheMasterKey(t *testing.T) {
	t.Parallel()
	k := setupKeys(t)
	line, err := keyring.New("dev")
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "master.key")
	require.NoError(t, os.WriteFile(file, []byte(line+"\n"), 0o600))
	var banner syncBuffer
	_, err = seedDemo(t.Context(), Config{DatabaseURL: k.url, HTTPAddr: ":8080"}, file, &banner, nil)
	require.NoError(t, err)
	url := regexp.MustCompile(`export DATABASE_URL='([^']+)'`).FindStringSubmatch(banner.String())
	require.NotNil(t, url, "the banner prints DATABASE_URL:\n%s", banner.String())
	key := regexp.MustCompile(`export MASTER_KEY_FILE='([^']+)'`).FindStringSubmatch(banner.String())
	require.NotNil(t, key, "the banner prints MASTER_KEY_FILE:\n%s", banner.String())
	printed := map[string]string{"DATABASE_URL": url[1], "MASTER_KEY_FILE": key[1], "USER": "tester"}
	for _, args := range [][]string{{"keys", "list"}, {"parked", "list"}} {
		var stdout, stderr syncBuffer
		require.NoError(t, run(t.Context(), args, env(printed), &stdout, &stderr), "%v: %s", args, stderr.String())
		if args[0] == "keys" {
			require.Contains(t, stdout.String(), "demo", "the printed database has the demo merchant's keys")
		}
	}

	// With a master key of the user's own, the banner names none.
	var own syncBuffer
	_, err = seedDemo(t.Context(), Config{DatabaseURL: k.url, HTTPAddr: ":8080"}, "", &own, nil)
	require.NoError(t, err)
	require.NotContains(t, own.String(), "MASTER_KEY_FILE")
}

// `app keyring rewrap` that fails at run time (a data key sealed by a master
// key no longer configured, the mistake the runbook warns about) is not a
// bad command line: it exits 1 with the cause, not 2 with the usage text.
func TestKeyringRewrapFailureIsNotAUsageError(t *testing.T) {
	t.Parallel()
	k := setupKeys(t)
	ctx := t.Context()
	// A merchant, and one customer's data key sealed under testMasterKey.
	key, err := k.store.CreateKey(ctx, "acme", access.Operator, "")
	require.NoError(t, err)
	old, err := vault.New(k.db.DB, mustRing(t, testMasterKey))
	require.NoError(t, err)
	subject := uuid.New()
	sealed, err := old.NewKey(subject)
	require.NoError(t, err)
	_, err = k.db.DB.ExecContext(ctx, vault.KeySQL, subject, key.MerchantID, "customer", sealed)
	require.NoError(t, err)

	// The operator removed the old master key too early.
	next, err := keyring.New("next")
	require.NoError(t, err)
	var stdout, stderr syncBuffer
	err = run(ctx, []string{"keyring", "rewrap"}, env(map[string]string{"DATABASE_URL": k.url, "MASTER_KEY": next, "USER": "tester"}), &stdout, &stderr)
	require.Error(t, err)
	require.ErrorContains(t, err, "not configured", "the cause is named")
	require.False(t, errors.As(err, new(usageError)),
		"a failure exits 1, not 2 with the usage text: %v", err)
}

// A key's secret given where its id goes (revoking a leaked key by what
// leaked) is refused without being repeated: what the command prints may
// end in a CI job's log.
func TestKeysCommandsNeverRepeatASecretGivenForAnID(t *testing.T) {
	t.Parallel()
	secret := "hk_" + strings.Repeat("keySECRET", 5)
	for _, verb := range []string{"revoke", "rotate"} {
		var stdout, stderr syncBuffer
		err := run(t.Context(), []string{"keys", verb, secret}, env(map[string]string{"DATABASE_URL": testDatabaseURL}), &stdout, &stderr)
		require.ErrorAs(t, err, new(usageError))
		require.ErrorContains(t, err, "ID must be")
		require.NotContains(t, err.Error()+stdout.String()+stderr.String(), "keySECRET", verb)
	}
}

// `app keyring rewrap` names a master key "no longer needed" only when
// nothing is sealed by it any more. An instance that still seals with the
// old key while the rewrap runs (one not restarted with the new key first,
// or restarted by its supervisor with its old configuration) writes a data
// key the rewrap's pages have passed; the runbook's next step, removing the
// old line, would then leave that customer's data key unopenable for good.
// Here a trigger plays that instance: the rewrap's re-seal of one data key
// makes another data key, sealed by the old key, behind the rewrap's page.
func TestKeyringRewrapNamesNoKeyUnneededThatStillSeals(t *testing.T) {
	t.Parallel()
	k := setupKeys(t)
	ctx := t.Context()
	key, err := k.store.CreateKey(ctx, "acme", access.Operator, "")
	require.NoError(t, err)
	old, err := vault.New(k.db.DB, mustRing(t, testMasterKey))
	require.NoError(t, err)
	first, late := "ffffffff-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000001"
	sealed, err := old.NewKey(first)
	require.NoError(t, err)
	_, err = k.db.DB.ExecContext(ctx, vault.KeySQL, first, key.MerchantID, "customer", sealed)
	require.NoError(t, err)
	lateSealed, err := old.NewKey(late)
	require.NoError(t, err)
	_, err = k.db.DB.ExecContext(ctx, `CREATE TABLE late_key (sealed bytea);
		CREATE FUNCTION old_instance_seals() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO data_keys (subject_id, merchant_id, subject_type, sealed)
			SELECT '`+late+`', '`+key.MerchantID+`', 'customer', sealed FROM late_key ON CONFLICT DO NOTHING;
			RETURN NULL;
		END $$;
		CREATE TRIGGER old_instance_seals AFTER UPDATE ON data_keys FOR EACH ROW EXECUTE FUNCTION old_instance_seals()`)
	require.NoError(t, err)
	_, err = k.db.DB.ExecContext(ctx, `INSERT INTO late_key VALUES ($1)`, lateSealed)
	require.NoError(t, err)

	next, err := keyring.New("next")
	require.NoError(t, err)
	var stdout, stderr syncBuffer
	err = run(ctx, []string{"keyring", "rewrap"}, env(map[string]string{"DATABASE_URL": k.url, "MASTER_KEY": next + "," + testMasterKey, "USER": "tester"}), &stdout, &stderr)

	var still []byte
	require.NoError(t, k.db.DB.QueryRowContext(ctx, `SELECT sealed FROM data_keys WHERE subject_id = $1`, late).Scan(&still))
	id, kerr := keyring.KeyID(still)
	require.NoError(t, kerr)
	require.Equal(t, "test", id, "the late data key is sealed by the old key")
	require.NotContains(t, stdout.String(), "no longer needed: test", "a key that still seals a data key is needed: %s", stdout.String())
	require.Error(t, err, "the rewrap did not finish: the old key still seals what it did not re-seal")
	require.ErrorContains(t, err, "test")
}

// A rotation without grace whose answer was lost (the CLI killed, or the
// HTTP client gone, after the commit and before the secret was shown) is
// run again: the old key is revoked by then, and the answer must name the
// key the first run made, which works and whose secret nobody has, so that
// the operator revokes it rather than leave it live beside the new key
// they create.
func TestARotationRunAgainAfterItsAnswerWasLostNamesTheKeyItMade(t *testing.T) {
	t.Parallel()
	k := setupKeys(t)
	secret := k.mustCreate("--merchant", "acme", "--role", "operator")
	p, err := k.store.Authenticate(t.Context(), secret)
	require.NoError(t, err)

	_, err = k.run("keys", "rotate", p.KeyID) // its output never reached anyone
	require.NoError(t, err)
	var made string
	require.NoError(t, k.db.DB.QueryRowContext(t.Context(), `SELECT id::text FROM api_keys WHERE id <> $1`, p.KeyID).Scan(&made))

	_, err = k.run("keys", "rotate", p.KeyID)
	require.ErrorContains(t, err, "key.revoked")
	require.ErrorContains(t, err, made, "the rerun names the key the lost rotation made")
}
