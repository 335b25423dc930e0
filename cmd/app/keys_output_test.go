package main

import (
	"errors"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/app/access"
)

// fullStdout is a standard output that takes nothing, as a redirect to a
// full disk (`app keys create ... > key.txt`) or a closed pipe does.
type fullStdout struct{}

func (fullStdout) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// A key's secret is shown once, on standard output: when it could not be
// written there the key exists and nobody has its secret. The command must
// fail (exit 1, not 2: the command line was right), naming the key it made
// and what to do, not exit 0 as if the operator held the key.
func TestAKeyWhoseSecretCouldNotBePrintedIsAFailure(t *testing.T) {
	t.Parallel()
	k := setupKeys(t)
	runTo := func(args ...string) error {
		var stderr syncBuffer
		return run(t.Context(), args, env(map[string]string{"DATABASE_URL": k.url, "USER": "tester"}), fullStdout{}, &stderr)
	}
	uuidIn := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

	err := runTo("keys", "create", "--merchant", "acme", "--role", "operator")
	require.Error(t, err, "keys create: the secret was never shown, yet the command succeeded")
	require.False(t, errors.As(err, new(usageError)), "a failure, not a usage error: %v", err)
	require.Contains(t, err.Error(), "no space left on device")
	require.Contains(t, err.Error(), "app keys revoke", "says how to get rid of the key nobody holds: %v", err)
	made := uuidIn.FindString(err.Error())
	require.NotEmpty(t, made, "names the key it made: %v", err)
	require.Contains(t, keyIDs(t, k), made, "the id named is the key that was made")

	old := k.mustCreate("--merchant", "acme", "--role", "operator")
	oldID := keyIDOf(t, k, old)
	err = runTo("keys", "rotate", oldID, "--grace", "1h")
	require.Error(t, err, "keys rotate: the new secret was never shown, yet the command succeeded")
	require.False(t, errors.As(err, new(usageError)), "a failure, not a usage error: %v", err)
	require.Contains(t, err.Error(), "app keys revoke", "says how to get rid of the key nobody holds: %v", err)
	named := uuidIn.FindAllString(err.Error(), -1)
	require.Contains(t, named, oldID, "names the key rotated: %v", err)
	require.NotEqual(t, []string{oldID}, slices.Compact(named), "names the key made too: %v", err)

	err = runTo("keyring", "new")
	require.Error(t, err, "keyring new: the master key line was never shown, yet the command succeeded")
	require.False(t, errors.As(err, new(usageError)), "a failure, not a usage error: %v", err)
}

// keyIDs is every stored key's id.
func keyIDs(t *testing.T, k keysBundle) []string {
	t.Helper()
	var ids []string
	require.NoError(t, k.db.NewSelect().Table("api_keys").Column("id").Scan(t.Context(), &ids))
	return ids
}

// keyIDOf is the id of the key whose secret is secret.
func keyIDOf(t *testing.T, k keysBundle, secret string) string {
	t.Helper()
	p, err := k.store.Authenticate(t.Context(), secret)
	require.NoError(t, err)
	require.Equal(t, access.Operator, p.Role)
	return p.KeyID
}
