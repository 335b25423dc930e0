package httpport

import "testing"

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
