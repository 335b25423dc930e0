package apperr

import (
	"strings"
	"testing"
)

// A quoted value is cut; the server's own text (%s) and a short value are
// not.
func TestMessageCutsQuotedValues(t *testing.T) {
	list := strings.Repeat("order.created, ", 60)
	if got, want := Message("got %q; one of %s", "nope", list), `got "nope"; one of `+list; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	long := strings.Repeat("é", 1000) // two bytes each: the cut falls inside one
	got := Message("got %q; one of %s", long, list)
	want := `got "` + strings.Repeat("é", MaxQuoted/2) + `"… (1744 bytes more); one of ` + list
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got, want := Clip("x"+long), "x"+strings.Repeat("é", MaxQuoted/2-1)+"… (1746 bytes more)"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
