package refdata

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The parsed working hours kept are bounded in bytes as well as in
// entries: a merchant's many large records do not pin the memory every
// tenant's requests share.
func TestParsedHoursAreBoundedInBytes(t *testing.T) {
	t.Parallel()
	var c parsedHours
	week, exceptions := []byte(`[[],[],[],[],[],[],[]]`), []byte(`[]`)
	items := []byte("[" + strings.Repeat(" ", 1<<20) + "]") // a megabyte of valid JSON
	for i := range 40 {
		_, err := c.parse(fmt.Sprintf("staff-%d", i), week, exceptions, items)
		require.NoError(t, err)
		require.LessOrEqual(t, c.bytes, maxParsedBytes)
	}
	require.Less(t, len(c.byStaff), 40, "the cache started afresh")
	// The same record parsed again is not counted twice.
	before := c.bytes
	_, err := c.parse("staff-39", week, exceptions, items)
	require.NoError(t, err)
	require.Equal(t, before, c.bytes)
}
