package readmodel

import (
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/aggregates"
)

// Every aggregate type has its table, and the Bun row model's tag (a
// struct tag, so written out) names the registry's table.
func TestTablesFollowTheRegistry(t *testing.T) {
	t.Parallel()
	all := aggregates.All()
	require.Len(t, targets(), len(all))
	for i, tg := range targets() {
		require.Equal(t, all[i].Projection, tg.projectionName())
		require.Equal(t, all[i].Table, tg.rowTable())
	}
}
