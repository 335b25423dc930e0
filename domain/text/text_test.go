package text_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/domain/apperr"
	"hearth/domain/text"
)

func TestProblem(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s               string
		line, multiline bool // acceptable as such
	}{
		{"Ada Lovelace", true, true},
		{"Zürich, 東京 🚀", true, true},
		{"", true, true},
		{"a\tb", false, true},
		{"a\nb\r\n", false, true},
		{"a\x00b", false, false},
		{"a\x1bb", false, false},   // ESC
		{"a\x7fb", false, false},   // DEL
		{"a\u0085b", false, false}, // NEL, a C1 control
		{"a\xffb", false, false},   // not UTF-8
		{"a\u200bb", true, true},   // zero-width space: a format character, not a control
	} {
		require.Equal(t, c.line, text.Problem(c.s, false) == "", "one line: %q", c.s)
		require.Equal(t, c.multiline, text.Problem(c.s, true) == "", "multi-line: %q", c.s)
	}
	var errs apperr.Fields
	text.Line(&errs, "name", "a\x00b")
	text.Lines(&errs, "notes", "a\nb")
	text.Lines(&errs, "address", "a\x00b")
	require.Equal(t, []string{"name", "address"}, []string{errs[0].Field, errs[1].Field})
	require.Len(t, errs, 2)
}
