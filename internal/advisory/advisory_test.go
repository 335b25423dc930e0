package advisory_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/advisory"
)

// The keys that running deployments take must not move: an old and a new
// instance exclude each other only while they agree.
func TestKeysStayStable(t *testing.T) {
	t.Parallel()
	require.Equal(t, int64(-3139509515664720772), advisory.Key(advisory.Projections))
	require.Equal(t, int64(8493339448354616686), advisory.Key(advisory.Relay))
	require.Equal(t, int64(binary.BigEndian.Uint64([]byte("hearth-migrations")[:8])), advisory.MigrationsKey)
}

func TestKeysDifferByName(t *testing.T) {
	t.Parallel()
	require.NotEqual(t, advisory.Key(advisory.Rebuild("orders")), advisory.Key(advisory.Rebuild("schedules")))
	require.Equal(t, "hearth/rebuild/orders", advisory.Rebuild("orders"))
	require.NotEqual(t, advisory.Key(advisory.Projection("orders")), advisory.Key(advisory.Projection("schedules")))
	require.Equal(t, "hearth/projections/orders", advisory.Projection("orders"))
}
