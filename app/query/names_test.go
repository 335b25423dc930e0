package query

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// lookups records what joinNames asked for.
type lookups struct {
	asked [][]string
	names map[string]string
}

func (l *lookups) Names(_ context.Context, _ string, _ NameKind, ids []string) (map[string]string, error) {
	l.asked = append(l.asked, ids)
	out := map[string]string{}
	for _, id := range ids {
		if n, ok := l.names[id]; ok {
			out[id] = n
		}
	}
	return out, nil
}

// Names a command read already are not looked up again; the others are,
// in one lookup.
func TestJoinNamesLooksUpOnlyWhatIsNotKnown(t *testing.T) {
	ctx := context.Background()
	customer := nameField[Order]{Customers, func(o *Order) *string { return &o.CustomerID }, func(o *Order) *string { return &o.CustomerName }}
	store := &lookups{names: map[string]string{"c1": "Ada", "c2": "Grace"}}

	one := []Order{{CustomerID: "c1"}}
	require.NoError(t, joinNames(ctx, store, "m", map[string]string{"c1": "Ada (read by the command)"}, one, customer))
	require.Equal(t, "Ada (read by the command)", one[0].CustomerName)
	require.Empty(t, store.asked, "a known name is not looked up")

	two := []Order{{CustomerID: "c1"}, {CustomerID: "c2"}}
	require.NoError(t, joinNames(ctx, store, "m", map[string]string{"c1": "Ada"}, two, customer))
	require.Equal(t, [][]string{{"c2"}}, store.asked, "only the unknown id is looked up")
	require.Equal(t, "Ada", two[0].CustomerName)
	require.Equal(t, "Grace", two[1].CustomerName)

	store.asked = nil
	none := []Order{{CustomerID: "c1"}}
	require.NoError(t, joinNames(ctx, store, "m", nil, none, customer))
	require.Equal(t, [][]string{{"c1"}}, store.asked)
	require.Equal(t, "Ada", none[0].CustomerName)
}
