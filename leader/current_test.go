package leader

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// CurrentTerm reads what TermDB records: nothing before the first term,
// then the term and holder of the latest leader, whichever instance asks.
func TestCurrentTerm(t *testing.T) {
	t.Parallel()
	url := testDB(t)
	e, err := New(Config{ConnString: url, TermDB: openDB(t, url), Holder: "observer", Log: testLogger(t)})
	require.NoError(t, err)
	_, ok, err := e.CurrentTerm(t.Context())
	require.NoError(t, err)
	require.False(t, ok, "no term yet")

	h := &hooks{}
	a := h.start(t, Config{ConnString: url, Holder: "a"})
	require.Eventually(t, a.leading.Load, 10*time.Second, 5*time.Millisecond)
	cur, ok, err := e.CurrentTerm(t.Context())
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, a.lastTerm(), cur.Term)
	require.Equal(t, "a", cur.Holder)
	require.WithinDuration(t, time.Now(), cur.Since, time.Minute)
}
