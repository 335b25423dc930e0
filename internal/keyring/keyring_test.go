package keyring

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func mustNew(t *testing.T, id string) string {
	t.Helper()
	line, err := New(id)
	require.NoError(t, err)
	return line
}

func mustParse(t *testing.T, text string) *Ring {
	t.Helper()
	r, err := Parse(text)
	require.NoError(t, err)
	return r
}

func TestSealOpen(t *testing.T) {
	r := mustParse(t, mustNew(t, "k1"))
	sealed, err := r.Seal([]byte("whsec_secret"), []byte("endpoint-1"))
	require.NoError(t, err)
	require.NotContains(t, string(sealed), "whsec_secret")
	id, err := KeyID(sealed)
	require.NoError(t, err)
	require.Equal(t, "k1", id)

	plain, err := r.Open(sealed, []byte("endpoint-1"))
	require.NoError(t, err)
	require.Equal(t, "whsec_secret", string(plain))

	_, err = r.Open(sealed, []byte("endpoint-2"))
	require.ErrorIs(t, err, ErrOpen, "sealed for another row")

	tampered := append([]byte(nil), sealed...)
	tampered[len(tampered)-1] ^= 1
	_, err = r.Open(tampered, []byte("endpoint-1"))
	require.ErrorIs(t, err, ErrOpen)
	for _, bad := range [][]byte{nil, {format}, {format, 5, 'k'}, {2, 2, 'k', '1'}, sealed[:len(sealed)-20]} {
		_, err = r.Open(bad, []byte("endpoint-1"))
		require.ErrorIs(t, err, ErrOpen, "%x", bad)
	}

	again, err := r.Seal([]byte("whsec_secret"), []byte("endpoint-1"))
	require.NoError(t, err)
	require.NotEqual(t, sealed, again, "a fresh nonce each time")
}

// A new active key seals what is new; the old one still opens what it
// sealed until Reseal moves it.
func TestRotation(t *testing.T) {
	old, next := mustNew(t, "2026-01"), mustNew(t, "2026-12")
	before := mustParse(t, old)
	sealed, err := before.Seal([]byte("data key"), []byte("subject"))
	require.NoError(t, err)

	after := mustParse(t, next+"\n"+old)
	require.Equal(t, "2026-12", after.ActiveID())
	require.Equal(t, []string{"2026-12", "2026-01"}, after.IDs())
	require.True(t, after.Stale(sealed))
	resealed, err := after.Reseal(sealed, []byte("subject"))
	require.NoError(t, err)
	require.False(t, after.Stale(resealed))
	plain, err := after.Open(resealed, []byte("subject"))
	require.NoError(t, err)
	require.Equal(t, "data key", string(plain))

	_, err = mustParse(t, next).Open(sealed, []byte("subject"))
	require.ErrorIs(t, err, ErrUnknownKey)
	require.ErrorContains(t, err, "2026-01", "names the missing key's id")
}

func TestParseErrorsNameTheLineNotTheKey(t *testing.T) {
	good := mustNew(t, "k1")
	short := "k2:" + base64.StdEncoding.EncodeToString([]byte("sixteen bytes!!!"))
	for text, want := range map[string]string{
		"":                       "no master key",
		"# only a comment\n":     "no master key",
		"nocolon":                "key 1: must be ID:KEY",
		good + "\nk2:not-base64": "key 2: KEY is not standard base64",
		short:                    "key 1: KEY must be 32 bytes, not 16",
		good + "," + good:        "key 2: id k1 is given twice",
		"bad id:" + good[3:]:     "key 1: the ID before the first ':' (6 characters) must be 1 to 64 letters",
		":" + good[3:]:           "key 1: the ID before the first ':' (0 characters)",
		good[3:] + ":k1":         "key 1: must be ID:KEY, and this one reads KEY:ID",
	} {
		_, err := Parse(text)
		require.ErrorContains(t, err, want, "%q", text)
		require.NotContains(t, err.Error(), good[3:], "an error never shows key material")
	}
	r := mustParse(t, "# master keys\n\n  "+good+"  \n")
	require.Equal(t, "k1", r.ActiveID())
	require.True(t, strings.HasPrefix(good, "k1:"))
}

// A line written KEY:ID whose key is in another encoding than standard
// base64 with padding (hex, as openssl rand -hex makes it; URL-safe or
// unpadded base64, as secret stores hand keys out) passes for an ID: only
// letters, digits, '-' and '_'. The error about the KEY that follows must
// not repeat it: a start-up error ends in the logs, which nothing erases.
func TestParseNeverRepeatsAKeyInTheIDsPlace(t *testing.T) {
	text, binary := []byte("thirty-two bytes of master key!!"), bytes.Repeat([]byte{0xfb, 0xff}, KeySize/2)
	require.Len(t, text, KeySize)
	for _, written := range []string{
		hex.EncodeToString(binary),
		base64.RawURLEncoding.EncodeToString(binary), // '-' and '_' where standard base64 has '+' and '/'
		base64.RawStdEncoding.EncodeToString(text),
	} {
		require.NoError(t, checkID(written), "%q passes for an ID", written)
		for _, line := range []string{written + ":main", written + ":" + written[:8]} {
			_, err := Parse(line)
			require.Error(t, err, "%q", line)
			require.NotContains(t, err.Error(), written, "%q: the key stays out of the message", line)
			require.Contains(t, err.Error(), "key 1", "the line is named")
		}
	}
}
