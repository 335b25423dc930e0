package uuid_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/domain/uuid"
)

func TestNewIsVersion4AndUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := uuid.New()
		require.True(t, uuid.Valid(id), id)
		require.Equal(t, byte('4'), id[14], "version nibble")
		require.Contains(t, "89ab", string(id[19]), "variant bits")
		require.False(t, seen[id])
		seen[id] = true
	}
}

func TestParse(t *testing.T) {
	got, ok := uuid.Parse("6BA7B810-9DAD-11D1-80B4-00C04FD430C8")
	require.True(t, ok)
	require.Equal(t, "6ba7b810-9dad-11d1-80b4-00c04fd430c8", got)
	for _, bad := range []string{"", "nope", "6ba7b8109dad11d180b400c04fd430c8", "6ba7b810-9dad-11d1-80b4-00c04fd430cg", "6ba7b810-9dad-11d1-80b4x00c04fd430c8"} {
		_, ok := uuid.Parse(bad)
		require.False(t, ok, bad)
		require.False(t, uuid.Valid(bad), bad)
	}
	mixed, ok := uuid.Parse("6ba7b810-9dad-11d1-80b4-00C04fd430c8")
	require.True(t, ok)
	require.Equal(t, "6ba7b810-9dad-11d1-80b4-00c04fd430c8", mixed)
	require.True(t, uuid.Valid("6BA7B810-9DAD-11D1-80B4-00C04FD430C8"))
}

// Ids are checked on every request: a valid one in lower case costs no
// copy.
func TestParseOfALowerCaseIDAllocatesNothing(t *testing.T) {
	id := uuid.New()
	allocs := testing.AllocsPerRun(100, func() {
		if got, ok := uuid.Parse(id); !ok || got != id || !uuid.Valid(id) {
			t.Fatal(got, ok)
		}
	})
	require.Zero(t, allocs)
}

func TestFromName(t *testing.T) {
	a, b := uuid.FromName("plan/2026-12-07"), uuid.FromName("plan/2026-12-14")
	if a != uuid.FromName("plan/2026-12-07") || a == b || !uuid.Valid(a) || a[14] != '5' {
		t.Fatalf("FromName: %s, %s", a, b)
	}
}
