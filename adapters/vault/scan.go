package vault

import (
	"bytes"
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
	if !bytes.Contains(data, sealedMember) {
		return nil, nil
	}
	_, start, end, ok := member(data, "sealed")
	if !ok {
		return nil, nil
	}
	var b Box
	if err := json.Unmarshal(data[start:end], &b); err != nil {
		return nil, err
	}
	return &b, nil
}
