package webhooks

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An endpoint worker whose rounds fail (the database gone) tries again
// after a second, then less and less often, never more than about half a
// minute apart; a round that works starts the count again.
func TestRoundBackOff(t *testing.T) {
	b := roundBackOff()
	var waits []time.Duration
	for range 10 {
		waits = append(waits, b.NextBackOff())
	}
	within := func(d, want time.Duration) bool { return d >= want*8/10 && d <= want*12/10 }
	require.True(t, within(waits[0], time.Second), "%v", waits)
	require.True(t, within(waits[1], 2*time.Second), "%v", waits)
	require.True(t, within(waits[2], 4*time.Second), "%v", waits)
	for _, w := range waits[6:] {
		require.True(t, within(w, 30*time.Second), "capped: %v", waits)
	}
	b.Reset()
	require.True(t, within(b.NextBackOff(), time.Second))
}
