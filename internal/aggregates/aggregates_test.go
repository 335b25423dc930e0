package aggregates_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/aggregates"
)

func TestRegistry(t *testing.T) {
	t.Parallel()
	names := aggregates.Projections()
	require.Equal(t, []string{"orders", "plans", "schedules", "service_requests"}, names)
	require.True(t, slices.IsSorted(names))
	types := map[string]bool{}
	for _, f := range aggregates.All() {
		require.False(t, types[f.Type], "stream type %s twice", f.Type)
		types[f.Type] = true
		require.NotNil(t, f.Decode, f.Type)
		got, ok := aggregates.ByType(f.Type)
		require.True(t, ok)
		require.Equal(t, f.Projection, got.Projection)
	}
	_, ok := aggregates.ByType("nothing")
	require.False(t, ok)
}
