package pubsub

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
)

// UnmarshalMessage is watermill-sql's (DefaultPostgreSQLSchema's): the same
// columns scanned, the same row and message returned, the same errors. Only
// the metadata is parsed by hand when it is what watermill writes (a flat
// object of plain strings): catch-up reads every message for every
// consumer, and json.Unmarshal into the metadata map was a large share of
// its CPU. Anything else goes to json.Unmarshal as before.
func (s KeysetSchema) UnmarshalMessage(row wsql.Scanner) (wsql.Row, error) {
	r := wsql.Row{}
	var transactionID int64
	var hidden bool
	dest := []any{&r.Offset, &transactionID, &r.UUID, &r.Payload, &r.Metadata}
	if s.Hidden {
		dest = append(dest, &hidden)
	}
	if err := row.Scan(dest...); err != nil {
		return wsql.Row{}, fmt.Errorf("could not scan message row: %w", err)
	}
	msg := message.NewMessage(string(r.UUID), r.Payload)
	if r.Metadata != nil {
		if err := unmarshalMetadata(r.Metadata, &msg.Metadata); err != nil {
			return wsql.Row{}, fmt.Errorf("could not unmarshal metadata as JSON: %w", err)
		}
	}
	r.Msg = msg
	r.ExtraData = map[string]any{
		"transaction_id": transactionID,
	}
	if s.Hidden {
		r.ExtraData[HiddenKey] = hidden
	}
	return r, nil
}

// unmarshalMetadata is json.Unmarshal(b, m), with a fast path for a flat
// object of strings without escapes. m is the empty map NewMessage makes.
func unmarshalMetadata(b []byte, m *message.Metadata) error {
	if parseMetadata(b, *m) {
		return nil
	}
	// Entries the fast path set before giving up, json.Unmarshal sets
	// again, to the same values.
	return json.Unmarshal(b, m)
}

// parseMetadata sets m's entries from b, a JSON object of strings, and
// reports whether b was one it reads exactly as json.Unmarshal would:
// strings with no escapes, valid UTF-8 (json.Unmarshal replaces invalid
// bytes), no control characters. A repeated key is set again, the last
// one winning, as in json.Unmarshal.
func parseMetadata(b []byte, m map[string]string) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		key, next, ok := plainString(b, skipSpace(b, i))
		if !ok {
			return false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		value, next, ok := plainString(b, skipSpace(b, i+1))
		if !ok {
			return false
		}
		m[metadataKey(key)] = string(value)
		i = skipSpace(b, next)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i++
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// metadataKey is string(key) without a copy for the keys the store writes
// on every message.
func metadataKey(key []byte) string {
	switch string(key) {
	case "type":
		return "type"
	case "stream_id":
		return "stream_id"
	case "version":
		return "version"
	case "merchant_id":
		return "merchant_id"
	case "correlation_id":
		return "correlation_id"
	case "traceparent":
		return "traceparent"
	}
	return string(key)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainString reads the string at b[i], which needs no unescaping, and
// returns its contents and the index after it.
func plainString(b []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	ascii := true
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			s = b[i+1 : j]
			return s, j + 1, ascii || utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, 0, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, 0, false
}
