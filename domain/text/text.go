// Package text is the rule for the free text Hearth stores: valid UTF-8
// without control characters (Unicode category Cc: NUL, the other C0
// controls, DEL and the C1 controls). A one-line field (a name, a phone, an
// email, a payment method) allows none; a multi-line field (an address, a
// note, a request's content, a reason) allows tab, line feed and carriage
// return. Postgres cannot store NUL in text at all, and the others have no
// place in a CRM's records.
package text

import (
	"unicode"
	"unicode/utf8"

	"hearth/domain/apperr"
)

// Problem says what is wrong with s as the text of a field ("" when
// nothing): multiline allows tab, line feed and carriage return.
func Problem(s string, multiline bool) string {
	if !utf8.ValidString(s) {
		return "must be valid UTF-8"
	}
	for _, r := range s {
		if !unicode.IsControl(r) || (multiline && (r == '\t' || r == '\n' || r == '\r')) {
			continue
		}
		if multiline {
			return "must not contain control characters other than tab, line feed and carriage return"
		}
		return "must not contain control characters"
	}
	return ""
}

// Line adds a field error when s is not one-line text.
func Line(errs *apperr.Fields, field, s string) { check(errs, field, s, false) }

// Lines adds a field error when s is not multi-line text.
func Lines(errs *apperr.Fields, field, s string) { check(errs, field, s, true) }

func check(errs *apperr.Fields, field, s string, multiline bool) {
	if p := Problem(s, multiline); p != "" {
		errs.Add(field, "%s", p)
	}
}
