package vault

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
)

// The hot paths (sealing on every command, opening on every projected
// event) work on the JSON bytes instead of a decoded map: an event's data
// is a flat object, so a member is found by its key, which inside a string
// value could only appear with its quotes escaped.

// member finds the top-level member key of the JSON object data: the
// index of its key's opening quote, and the start and end of its value
// (spaces around the colon allowed, as Postgres's jsonb writes them). ok is
// false when data has no such member or the value cannot be delimited.
func member(data []byte, key string) (at, start, end int, ok bool) {
	quoted := `"` + key + `"`
	from := 0
	for {
		i := bytes.Index(data[from:], []byte(quoted))
		if i < 0 {
			return 0, 0, 0, false
		}
		i += from
		from = i + len(quoted)
		// A key follows '{' or ',' (and spaces), and is followed by ':'.
		j := i - 1
		for j >= 0 && isSpace(data[j]) {
			j--
		}
		k := from
		for k < len(data) && isSpace(data[k]) {
			k++
		}
		if j < 0 || (data[j] != '{' && data[j] != ',') || k >= len(data) || data[k] != ':' {
			continue // a value equal to key, not the key
		}
		k++
		for k < len(data) && isSpace(data[k]) {
			k++
		}
		end, ok := valueEnd(data, k)
		return i, k, end, ok
	}
}

// valueEnd returns the end of the JSON value starting at start: a string,
// an object or array (by nesting, strings skipped), or a literal.
func valueEnd(data []byte, start int) (int, bool) {
	if start >= len(data) {
		return 0, false
	}
	depth := 0
	for i := start; i < len(data); i++ {
		switch c := data[i]; c {
		case '"':
			e, ok := stringEnd(data, i)
			if !ok {
				return 0, false
			}
			if depth == 0 {
				return e, true
			}
			i = e - 1
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 { // the end of the enclosing object: a literal ended here
				return i, i > start
			}
			depth--
			if depth == 0 {
				return i + 1, true
			}
		case ',':
			if depth == 0 {
				return i, i > start
			}
		}
	}
	return 0, false
}

// stringEnd returns the index after the closing quote of the string whose
// opening quote is at start.
func stringEnd(data []byte, start int) (int, bool) {
	for i := start + 1; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1, true
		}
	}
	return 0, false
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// cut removes the top-level members of fields from data (a flat JSON object
// as encoding/json writes it) and returns what is left and the removed
// members as one object, with the names of those found, in fields' order.
// ok is false when data is not of that shape; the caller then takes the
// slow path.
func cut(data []byte, fields []string) (rest, removed []byte, names []string, ok bool) {
	rest = data
	removed = append(make([]byte, 0, 64), '{')
	for _, f := range fields {
		at, _, end, found := member(rest, f)
		if !found {
			if bytes.Contains(rest, []byte(`"`+f+`"`)) {
				return nil, nil, nil, false // there, but not where expected
			}
			continue
		}
		if len(names) > 0 {
			removed = append(removed, ',')
		}
		removed = append(removed, rest[at:end]...)
		names = append(names, f)
		// Drop the member and one comma next to it.
		from, to := at, end
		j := from - 1
		for j >= 0 && isSpace(rest[j]) {
			j--
		}
		k := to
		for k < len(rest) && isSpace(rest[k]) {
			k++
		}
		switch {
		case k < len(rest) && rest[k] == ',':
			to = k + 1
		case j >= 0 && rest[j] == ',':
			from = j
		}
		rest = append(append(make([]byte, 0, len(rest)-(to-from)), rest[:from]...), rest[to:]...)
	}
	removed = append(removed, '}')
	return rest, removed, names, json.Valid(rest)
}

// boxOf finds the sealed member of data, nil when there is none.
func boxOf(data []byte) (*Box, error) {
	_, start, end, ok := sealedIn(data)
	if !ok {
		return nil, nil
	}
	return parseBox(data[start:end])
}

// sealedIn finds data's sealed member: the index of its key, and the
// start and end of its value.
func sealedIn(data []byte) (at, start, end int, ok bool) {
	if !bytes.Contains(data, sealedMember) {
		return 0, 0, 0, false
	}
	return member(data, "sealed")
}

// parseBox decodes a sealed member's value. Every sealed event of a
// catch-up goes through it (once for Prefetch's subject, once to open), so
// the form SealWith writes ({"subject":"…","fields":["…",…],"box":"…"},
// plain ASCII strings, any order and spacing) is read by hand; anything
// else goes through encoding/json, which decides what is valid.
func parseBox(obj []byte) (*Box, error) {
	if b, ok := scanBox(obj); ok {
		return b, nil
	}
	var b Box
	if err := json.Unmarshal(obj, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// scanBox is parseBox's fast path; ok is false for whatever it does not
// read exactly as encoding/json would.
func scanBox(obj []byte) (_ *Box, ok bool) {
	var b Box
	var seen [3]bool
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return nil, false
	}
	for {
		from, to, next, ok := plainSpan(obj, skipSpace(obj, i+1))
		if !ok {
			return nil, false
		}
		i = skipSpace(obj, next)
		if i >= len(obj) || obj[i] != ':' {
			return nil, false
		}
		i = skipSpace(obj, i+1)
		switch key := obj[from:to]; {
		case string(key) == "subject" && !seen[0]:
			seen[0] = true
			if b.Subject, i, ok = plainString(obj, i); !ok {
				return nil, false
			}
		case string(key) == "fields" && !seen[1]:
			seen[1] = true
			start := i
			if b.count, i, ok = plainStrings(obj, i); !ok {
				return nil, false
			}
			b.fields = obj[start:i:i]
		case string(key) == "box" && !seen[2]:
			seen[2] = true
			var s, e int
			if s, e, i, ok = plainSpan(obj, i); !ok {
				return nil, false
			}
			box := make([]byte, base64.StdEncoding.DecodedLen(e-s))
			n, err := base64.StdEncoding.Decode(box, obj[s:e])
			if err != nil {
				return nil, false // encoding/json words the error
			}
			b.Box = box[:n]
		default: // another member, or one twice
			return nil, false
		}
		i = skipSpace(obj, i)
		if i >= len(obj) {
			return nil, false
		}
		switch obj[i] {
		case ',':
			continue
		case '}':
			return &b, skipSpace(obj, i+1) == len(obj)
		default:
			return nil, false
		}
	}
}

// plainSpan finds the JSON string at obj[i] when it is printable ASCII
// without escapes: its contents are obj[from:to], next is after its
// closing quote.
func plainSpan(obj []byte, i int) (from, to, next int, ok bool) {
	if i >= len(obj) || obj[i] != '"' {
		return 0, 0, 0, false
	}
	for j := i + 1; j < len(obj); j++ {
		switch c := obj[j]; {
		case c == '"':
			return i + 1, j, j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return 0, 0, 0, false
		}
	}
	return 0, 0, 0, false
}

// plainString is plainSpan's string.
func plainString(obj []byte, i int) (_ string, next int, ok bool) {
	from, to, next, ok := plainSpan(obj, i)
	if !ok {
		return "", 0, false
	}
	return string(obj[from:to]), next, true
}

// plainStrings checks the JSON array of plainSpan strings at obj[i] and
// counts them.
func plainStrings(obj []byte, i int) (count, next int, ok bool) {
	if i >= len(obj) || obj[i] != '[' {
		return 0, 0, false
	}
	i = skipSpace(obj, i+1)
	if i < len(obj) && obj[i] == ']' {
		return 0, i + 1, true
	}
	for {
		if _, _, i, ok = plainSpan(obj, i); !ok {
			return 0, 0, false
		}
		count++
		i = skipSpace(obj, i)
		if i >= len(obj) {
			return 0, 0, false
		}
		switch obj[i] {
		case ',':
			i = skipSpace(obj, i+1)
		case ']':
			return count, i + 1, true
		default:
			return 0, 0, false
		}
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && isSpace(data[i]) {
		i++
	}
	return i
}

// spliced returns data with its member data[at:end] (the sealed one)
// replaced by the members of the JSON object opened, so that the event
// decodes in one pass instead of one over data (its box included) and
// another over opened. ok is false when opened is not a non-empty object.
func spliced(data []byte, at, end int, opened []byte) (_ []byte, ok bool) {
	o := bytes.TrimSpace(opened)
	if len(o) < 2 || o[0] != '{' || o[len(o)-1] != '}' {
		return nil, false
	}
	inner := bytes.TrimSpace(o[1 : len(o)-1])
	if len(inner) == 0 {
		return nil, false
	}
	out := make([]byte, 0, at+len(inner)+len(data)-end)
	out = append(out, data[:at]...)
	out = append(out, inner...)
	return append(out, data[end:]...), true
}

// subjectOf returns the subject of data's sealed member, for Prefetch:
// ok is false when data is not sealed or its subject is not a plain
// string (the decoder then reads the key, or reports the event, itself).
func subjectOf(data []byte) (string, bool) {
	_, start, end, ok := sealedIn(data)
	if !ok {
		return "", false
	}
	obj := data[start:end]
	_, s, _, ok := member(obj, "subject")
	if !ok {
		return "", false
	}
	subject, _, ok := plainString(obj, s)
	return subject, ok
}
