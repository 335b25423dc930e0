// Package event defines what every event-sourced aggregate shares: the event
// interface, the envelope an event is stored and delivered in, and the
// metadata of the command that caused it.
package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Event is a domain event payload. Its type name is stable: it is stored.
type Event interface {
	EventType() string
}

// Meta describes the command that causes events: who, for which merchant,
// when, and in which chain of causes.
type Meta struct {
	MerchantID    string
	Actor         string // the acting key's subject, e.g. "key:<id>"
	CorrelationID string
	CausationID   string // empty when the command has no causing event
	OccurredAt    time.Time
}

// Envelope is an event as stored in the event store and delivered to
// projections.
type Envelope struct {
	ID            string          `json:"event_id"`
	Type          string          `json:"type"`
	StreamType    string          `json:"stream_type"`
	StreamID      string          `json:"stream_id"`
	Version       int             `json:"version"`
	MerchantID    string          `json:"merchant_id"`
	OccurredAt    time.Time       `json:"occurred_at"`
	CorrelationID string          `json:"correlation_id"`
	CausationID   string          `json:"causation_id,omitempty"`
	Actor         string          `json:"actor"`
	Data          json.RawMessage `json:"data"`
}

// Decoder turns a stored payload back into a typed event. more, when given,
// are JSON objects decoded into the same event after data: the fields the
// vault opened from the event's sealed box, or the erased marker.
type Decoder func(eventType string, data []byte, more ...[]byte) (Event, error)

// Recorded is a stored event with its payload decoded.
type Recorded struct {
	Envelope
	Event Event
}

// Unmarshal parses and checks an envelope read back from the store or the
// bus and decodes its payload. Anything missing or malformed is an error
// that names the field: a corrupt event must never be applied as zero values.
func Unmarshal(payload []byte, decode Decoder) (Recorded, error) {
	env, ok := parseEnvelope(payload)
	if !ok {
		// Whatever the fast path does not fully understand: encoding/json
		// decides, and its error is the one reported.
		if err := json.Unmarshal(payload, &env); err != nil {
			return Recorded{}, fmt.Errorf("event envelope: %w", err)
		}
	}
	return checked(env, decode)
}

// UnreadableError is a stored event this release cannot read back: a type
// it does not know (a newer release's, during a rolling upgrade), a payload
// that does not parse, a value its type always carries missing, sealed
// fields that do not open. It is the event's own: reading it again answers
// the same until a release that reads it runs or the row is repaired, so a
// reader that goes through many aggregates (the visit generator) counts it
// against the aggregate, not against the database. A failure to read
// something the event needs (its data key, while the database is away) is
// not one.
type UnreadableError struct {
	EventID  string
	Type     string // as stored
	StreamID string
	Version  int
	Err      error
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("stream %s version %d (event %s): %v", e.StreamID, e.Version, e.EventID, e.Err)
}

func (e *UnreadableError) Unwrap() error { return e.Err }

// checked checks a parsed envelope and decodes its payload.
func checked(env Envelope, decode Decoder) (Recorded, error) {
	switch {
	case env.ID == "":
		return Recorded{}, errors.New("event envelope: event_id is missing")
	case env.Type == "":
		return Recorded{}, fmt.Errorf("event %s: type is missing", env.ID)
	case env.StreamType == "":
		return Recorded{}, fmt.Errorf("event %s: stream_type is missing", env.ID)
	case env.StreamID == "":
		return Recorded{}, fmt.Errorf("event %s: stream_id is missing", env.ID)
	case env.Version < 1:
		return Recorded{}, fmt.Errorf("event %s: version %d is not positive", env.ID, env.Version)
	case env.MerchantID == "":
		return Recorded{}, fmt.Errorf("event %s: merchant_id is missing", env.ID)
	case env.OccurredAt.IsZero():
		return Recorded{}, fmt.Errorf("event %s: occurred_at is missing", env.ID)
	}
	e, err := decode(env.Type, env.Data)
	if err != nil {
		return Recorded{}, fmt.Errorf("event %s: %w", env.ID, err)
	}
	return Recorded{Envelope: env, Event: e}, nil
}

// Instant normalises a time as Postgres stores it: UTC, with microsecond
// precision, so that events, responses, read models and reference data
// agree. It is the one place that normalisation is written: every time
// Hearth stores (event times, key expiries, record timestamps, key uses)
// goes through it.
func Instant(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// MaxInstant is the last instant Hearth stores and answers.
var MaxInstant = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)

// InstantProblem says why t cannot be stored, or "" when it can: RFC 3339
// has four digits for the year, and a time that parses with an offset can
// lie outside years 0001 to 9999 once in UTC (9999-12-31T23:00:00-02:00),
// where it would fail to marshal in every event and answer.
func InstantProblem(t time.Time) string {
	if y := t.UTC().Year(); y < 1 || t.After(MaxInstant) {
		return "must lie between the years 0001 and 9999 in UTC"
	}
	return ""
}

// InstantPtr is Instant for an optional time.
func InstantPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := Instant(*t)
	return &u
}

// Registry maps the stored type names of one aggregate's events to their
// decoders.
type Registry map[string]func(data []byte, more ...[]byte) (Event, error)

// As decodes a payload as event type T, then each of more into the same
// value, and checks it (Checker) once every part is in.
func As[T Event](data []byte, more ...[]byte) (Event, error) {
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return v, err
	}
	for _, m := range more {
		if err := json.Unmarshal(m, &v); err != nil {
			return v, err
		}
	}
	if c, ok := any(v).(Checker); ok {
		if err := c.Check(); err != nil {
			return v, err
		}
	}
	return v, nil
}

// Checker is an event type that knows which of its values Hearth always
// writes. encoding/json leaves a key that is missing or null at its zero
// value without a word, so a stored event without one (a hand-edited or
// corrupt row, another writer's bug) would otherwise be applied, published
// and decided on as "" or the zero time: an order's status set to "", an
// order.status_changed to "". Check runs when the event is read back,
// never when it is written.
//
// It asks for presence only, not for a value this release knows: a status
// a newer release adds reads as it is during a rolling upgrade, as before.
// Fields that hold personal data are never required: they are sealed
// apart (a reader that does not open them sees them missing) and erased.
type Checker interface {
	Check() error
}

// MissingValueError is a stored event without a value its type always
// carries (Checker).
type MissingValueError struct {
	// Field is the value's JSON name.
	Field string
}

func (e *MissingValueError) Error() string {
	return fmt.Sprintf("%q is missing or null, and every event of this type has it", e.Field)
}

// Value is one value a Checker requires: its JSON name, and whether the
// decoded event holds it.
type Value struct {
	Field   string
	Present bool
}

// Has is the Value of field, present or not.
func Has(field string, present bool) Value { return Value{Field: field, Present: present} }

// Require returns a *MissingValueError naming the first of values that is
// not present, or nil.
func Require(values ...Value) error {
	for _, v := range values {
		if !v.Present {
			return &MissingValueError{Field: v.Field}
		}
	}
	return nil
}

// Types returns the registry's stored type names, sorted.
func (r Registry) Types() []string {
	out := make([]string, 0, len(r))
	for t := range r {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// UnknownTypeError is a stored event of a type this release does not know:
// a newer release's (during a rolling upgrade the previous release's
// instances read what the new one writes), or a corrupt row. A reader whose
// work can wait for the release that knows it (a webhook delivery) waits.
type UnknownTypeError struct{ Type string }

func (e *UnknownTypeError) Error() string { return fmt.Sprintf("unknown event type %q", e.Type) }

// Decode decodes a stored payload. An unknown type (*UnknownTypeError) or a
// payload that does not parse is an error, so that a corrupt event is reported rather than
// applied as zero values.
func (r Registry) Decode(eventType string, data []byte, more ...[]byte) (Event, error) {
	decode, ok := r[eventType]
	if !ok {
		return nil, &UnknownTypeError{Type: eventType}
	}
	e, err := decode(data, more...)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", eventType, err)
	}
	return e, nil
}
