// Package uuid creates and checks the identifiers Hearth uses for every
// entity and event: RFC 9562 version 4 UUIDs in their canonical lower-case
// text form. The domain keeps ids as strings; this package is the one place
// that knows their shape.
package uuid

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
)

// New returns a new random (version 4) UUID.
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// Parse checks that s is a UUID in the canonical 8-4-4-4-12 hex form (any
// case) and returns it in lower case. It copies s only to lower it: ids
// are checked on every request, nearly always in lower case already.
func Parse(s string) (string, bool) {
	upper, ok := scan(s)
	if !ok {
		return "", false
	}
	if !upper {
		return s, true
	}
	out := []byte(s)
	for i, c := range out {
		if 'A' <= c && c <= 'F' {
			out[i] = c + ('a' - 'A')
		}
	}
	return string(out), true
}

// Valid reports whether s is a UUID in canonical form.
func Valid(s string) bool {
	_, ok := scan(s)
	return ok
}

// scan reports whether s is a UUID in the 8-4-4-4-12 hex form, and
// whether it has upper-case digits.
func scan(s string) (upper, ok bool) {
	if len(s) != 36 {
		return false, false
	}
	for i := range len(s) {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false, false
			}
			continue
		}
		switch {
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f':
		case 'A' <= c && c <= 'F':
			upper = true
		default:
			return false, false
		}
	}
	return upper, true
}

// FromName returns the name-based (version 5, SHA-1) UUID of name in
// Hearth's own namespace: the same name always gives the same id, so a
// second attempt at creating the thing named (an order for one visit of a
// plan) meets the first one's stream instead of starting another.
func FromName(name string) string {
	h := sha1.New()
	h.Write(namespace[:])
	h.Write([]byte(name))
	var b [16]byte
	copy(b[:], h.Sum(nil))
	b[6] = b[6]&0x0f | 0x50
	b[8] = b[8]&0x3f | 0x80
	s := hex.EncodeToString(b[:])
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}

// namespace is Hearth's namespace of name-based ids (itself a random
// UUID, fixed for ever: changing it changes every derived id).
var namespace = [16]byte{0x6c, 0x1f, 0x0e, 0x8a, 0x3b, 0x52, 0x4d, 0x1e, 0x9f, 0x27, 0x5a, 0x80, 0x1c, 0x44, 0xd3, 0x9b}
