package event

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// parseEnvelope is a hand-written parser for the envelope as Hearth writes
// it, the fast path of Unmarshal. Catch-up decodes every stored event once
// for every consumer, and there encoding/json's reflection and its validity
// pre-scan of the whole payload dominated the CPU.
//
// It reports ok only for a payload it understands completely: one JSON
// object whose known members have plain values (strings without escapes,
// valid UTF-8, an integer version, a time occurred_at, a non-null data)
// and each appear once; unknown members, which encoding/json ignores, are
// skipped. Everything it reads, data and unknown members too, is checked
// against JSON's grammar, so that ok means encoding/json accepts the
// payload and decodes it to the same envelope. For anything else (escapes,
// nulls, duplicate or case-folded keys, numbers that are not plain
// integers, deep nesting, invalid JSON) it reports !ok and Unmarshal
// decodes with encoding/json, which gives the same result or error as
// before.
//
// env.Data is a sub-slice of payload (capped, so that appending to it
// copies), not a copy as encoding/json makes: the payload is the caller's
// own buffer, read from the store for this event.
func parseEnvelope(payload []byte) (env Envelope, ok bool) {
	s := scanner{b: payload}
	s.space()
	if !s.eat('{') {
		return Envelope{}, false
	}
	s.space()
	if !s.eat('}') {
		var seen uint16
		for {
			s.space()
			key, ok := s.plainString()
			if !ok {
				return Envelope{}, false
			}
			s.space()
			if !s.eat(':') {
				return Envelope{}, false
			}
			s.space()
			f := fieldOf(key)
			if f == fieldFolded {
				return Envelope{}, false
			}
			if f >= 0 {
				if seen&(1<<f) != 0 {
					return Envelope{}, false // encoding/json: the last one wins
				}
				seen |= 1 << f
			}
			if !s.member(f, &env) {
				return Envelope{}, false
			}
			s.space()
			if s.eat(',') {
				continue
			}
			if s.eat('}') {
				break
			}
			return Envelope{}, false
		}
	}
	s.space()
	if s.i != len(s.b) {
		return Envelope{}, false
	}
	return env, true
}

// The envelope's members, as fieldOf numbers them.
const (
	fieldID = iota
	fieldType
	fieldStreamType
	fieldStreamID
	fieldVersion
	fieldMerchantID
	fieldOccurredAt
	fieldCorrelationID
	fieldCausationID
	fieldActor
	fieldData

	fieldUnknown = -1
	// fieldFolded is a key encoding/json would match to a member without
	// being its exact name: it matches names case-insensitively, and
	// folds some non-ASCII letters (the Kelvin sign to k) too.
	fieldFolded = -2
)

var fieldNames = [...]string{
	fieldID:            "event_id",
	fieldType:          "type",
	fieldStreamType:    "stream_type",
	fieldStreamID:      "stream_id",
	fieldVersion:       "version",
	fieldMerchantID:    "merchant_id",
	fieldOccurredAt:    "occurred_at",
	fieldCorrelationID: "correlation_id",
	fieldCausationID:   "causation_id",
	fieldActor:         "actor",
	fieldData:          "data",
}

func fieldOf(key []byte) int {
	for f, name := range fieldNames {
		if string(key) == name {
			return f
		}
	}
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return fieldFolded
		}
	}
	for _, name := range fieldNames {
		if bytes.EqualFold(key, []byte(name)) {
			return fieldFolded
		}
	}
	return fieldUnknown
}

// member reads the value of member f into env, or skips it when f is
// unknown.
func (s *scanner) member(f int, env *Envelope) bool {
	switch f {
	case fieldVersion:
		n, ok := s.integer()
		env.Version = n
		return ok
	case fieldOccurredAt:
		start := s.i
		if _, ok := s.plainString(); !ok {
			return false
		}
		// The very call encoding/json makes, on the same quoted bytes.
		return env.OccurredAt.UnmarshalJSON(s.b[start:s.i]) == nil
	case fieldData:
		start := s.i
		if !s.skipValue(0) {
			return false
		}
		raw := s.b[start:s.i:s.i]
		if string(raw) == "null" {
			return false
		}
		env.Data = json.RawMessage(raw)
		return true
	case fieldUnknown:
		return s.skipValue(0)
	}
	v, ok := s.plainString()
	if !ok {
		return false
	}
	str := string(v)
	switch f {
	case fieldID:
		env.ID = str
	case fieldType:
		env.Type = str
	case fieldStreamType:
		env.StreamType = str
	case fieldStreamID:
		env.StreamID = str
	case fieldMerchantID:
		env.MerchantID = str
	case fieldCorrelationID:
		env.CorrelationID = str
	case fieldCausationID:
		env.CausationID = str
	case fieldActor:
		env.Actor = str
	}
	return true
}

// scanner reads JSON from b at i.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// plainString reads a string that needs no unescaping and is valid UTF-8
// (encoding/json replaces invalid bytes), and returns its contents.
func (s *scanner) plainString() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	start, ascii := s.i, true
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			return v, ascii || utf8.Valid(v)
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// integer reads a number that is a plain integer, as strconv.ParseInt
// would accept it into an int.
func (s *scanner) integer() (int, bool) {
	neg := s.eat('-')
	start := s.i
	n := 0
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		d := int(s.b[s.i] - '0')
		if n > (maxInt-d)/10 {
			return 0, false // out of range: encoding/json's error
		}
		n = n*10 + d
		s.i++
	}
	switch {
	case s.i == start, s.b[start] == '0' && s.i-start > 1:
		return 0, false
	case s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E'):
		return 0, false // a fraction or exponent: encoding/json's error
	}
	if neg {
		n = -n
	}
	return n, true
}

const maxInt = int(^uint(0) >> 1)

// maxDepth bounds the nesting skipValue follows; deeper values go to
// encoding/json, which has its own limit.
const maxDepth = 100

// skipValue steps over one JSON value, checking its grammar.
func (s *scanner) skipValue(depth int) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		return s.skipString()
	case c == '{', c == '[':
		if depth >= maxDepth {
			return false
		}
		return s.skipContainer(depth)
	case c == '-' || '0' <= c && c <= '9':
		return s.skipNumber()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return false
}

// skipContainer steps over an object or an array.
func (s *scanner) skipContainer(depth int) bool {
	object := s.b[s.i] == '{'
	end := byte(']')
	if object {
		end = '}'
	}
	s.i++
	s.space()
	if s.eat(end) {
		return true
	}
	for {
		s.space()
		if object {
			if s.i >= len(s.b) || s.b[s.i] != '"' || !s.skipString() {
				return false
			}
			s.space()
			if !s.eat(':') {
				return false
			}
			s.space()
		}
		if !s.skipValue(depth + 1) {
			return false
		}
		s.space()
		if s.eat(',') {
			continue
		}
		return s.eat(end)
	}
}

// skipString steps over a string with any escapes. encoding/json lets
// invalid UTF-8 through its check (it replaces it when unquoting), so
// this does too.
func (s *scanner) skipString() bool {
	s.i++ // the opening quote
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			s.i++
			if s.i >= len(s.b) {
				return false
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if s.i+4 >= len(s.b) {
					return false
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !isHex(h) {
						return false
					}
				}
				s.i += 5
			default:
				return false
			}
		default:
			s.i++
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// skipNumber steps over a number: -? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?
func (s *scanner) skipNumber() bool {
	s.eat('-')
	switch {
	case s.eat('0'):
	case s.digits() == 0:
		return false
	}
	if s.eat('.') && s.digits() == 0 {
		return false
	}
	if s.eat('e') || s.eat('E') {
		if !s.eat('+') {
			s.eat('-')
		}
		if s.digits() == 0 {
			return false
		}
	}
	return true
}

func (s *scanner) digits() int {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i - start
}

func (s *scanner) literal(lit string) bool {
	if !bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
		return false
	}
	s.i += len(lit)
	return true
}
