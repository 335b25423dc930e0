package httpport

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Both scans of a body for a member given twice agree, on names in
// strings, escaped names, nested objects and arrays; the slow one names
// the member by its path.
func TestRepeatedMembers(t *testing.T) {
	for body, want := range map[string]string{
		`{"a":1,"b":2}`:                   "",
		`{"a":1,"A":2}`:                   "A",
		`{"a":1,"a":2}`:                   "a",
		`{}`:                              "",
		`{"x":{},"y":[]}`:                 "",
		`{"x":{"p":1,"q":{"r":1,"R":2}}}`: "x.q.R",
		`{"l":[{"a":1},{"a":1,"b":{"c":1,"C":1}}]}`: "l[1].b.C",
		`{"l":[1,[2,{"z":1,"Z":1}]]}`:               "l[1][1].Z",
		`{"a":[],"A":1}`:                            "A",
		`{"a":{"a":1},"b":1}`:                       "",
		`{"a":"x\"A\":1","b":["a","A"]}`:            "",
		`{"a":1,"\u0041":2}`:                        "A",
		`{"s":"\\","S":1}`:                          "S",
		`{"k":1,"\u212a":1}`:                        "\u212a", // Kelvin sign: K, folded as encoding/json does
		`[1,2]`:                                     "",
		`{"a":{"b":1},"c":{"b":1}}`:                 "",
	} {
		if got := repeatedMember([]byte(body)); got != want {
			t.Errorf("%s: got %q, want %q", body, got, want)
		}
		if got := hasRepeatedMember([]byte(body)); got != (want != "") {
			t.Errorf("fast %s: got %v, want %v", body, got, want != "")
		}
	}
}

// An object of many names (a map target takes any) is checked by folded
// key past a few, so that the scan stays linear in the names (compared one
// by one, a body of a megabyte of names took the CPU for seconds): the
// same answers as one by one.
func TestRepeatedMembersOfManyNames(t *testing.T) {
	many := func(n int, last string) []byte {
		var b strings.Builder
		b.WriteString(`{"week":{`)
		for i := range n {
			fmt.Fprintf(&b, `"n%d":1,`, i)
		}
		b.WriteString(`"` + last + `":1}}`)
		return []byte(b.String())
	}
	for _, n := range []int{3, manyNames, manyNames + 5, 100_000} {
		require.False(t, hasRepeatedMember(many(n, "other")), n)
		require.True(t, hasRepeatedMember(many(n, "N0")), n)
		require.True(t, hasRepeatedMember(many(n, fmt.Sprintf("N%d", n-1))), n)
		if n < 1000 { // the token walk, which names the member
			require.Equal(t, "week.N0", repeatedMember(many(n, "N0")), n)
		}
	}
	kelvin := []byte(`{"k":1,"a1":1,"a2":1,"a3":1,"a4":1,"a5":1,"a6":1,"a7":1,"a8":1,"a9":1,"b1":1,"b2":1,"b3":1,"b4":1,"b5":1,"b6":1,"b7":1,"\u212a":1}`)
	require.True(t, hasRepeatedMember(kelvin), "the Kelvin sign folds to k, by key too")
	require.Equal(t, "K", foldKey("\u212a")[:1], "folded to the orbit's least rune")
}
