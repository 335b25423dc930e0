package event

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// referenceUnmarshal is Unmarshal as it was before the fast path:
// encoding/json alone, then the same checks. The fast path must not change
// what it returns.
func referenceUnmarshal(payload []byte, decode Decoder) (Recorded, error) {
	var env Envelope
	if err := json.Unmarshal(payload, &env); err != nil {
		return Recorded{}, fmt.Errorf("event envelope: %w", err)
	}
	return checked(env, decode)
}

// rawEvent is what decodeRaw returns: the data it was given.
type rawEvent struct{ data string }

func (rawEvent) EventType() string { return "raw" }

// decodeRaw hands the data back, so that a comparison of two Recorded
// compares the data each decoder was given too.
func decodeRaw(_ string, data []byte, _ ...[]byte) (Event, error) {
	return rawEvent{string(data)}, nil
}

// realistic is an envelope as the store writes it (json.Marshal of the
// envelope, data spliced in last), with an order's data.
func realistic(tb testing.TB) []byte {
	tb.Helper()
	at := time.Date(2026, 11, 30, 10, 0, 0, 123456000, time.UTC)
	data, err := json.Marshal(map[string]any{
		"order_id": "0b6f7c1e-3d2a-4c55-9d8e-1f2a3b4c5d6e", "customer_id": "7d1e2f3a-4b5c-6d7e-8f90-a1b2c3d4e5f6",
		"amount_cents": 125000, "notes": "side gate, ring twice — \"Büro\"", "status": "pending",
		"scheduled_start_at": at, "scheduled_end_at": at.Add(2 * time.Hour),
		"plan_id": "", "visit_date": "2026-12-01",
	})
	require.NoError(tb, err)
	payload, err := json.Marshal(Envelope{
		ID: "5f0c2a9e-8b7d-4e6f-a1b2-c3d4e5f60718", Type: "OrderCreated", StreamType: "order",
		StreamID: "0b6f7c1e-3d2a-4c55-9d8e-1f2a3b4c5d6e", Version: 1, MerchantID: "9a8b7c6d-5e4f-4a3b-2c1d-0e9f8a7b6c5d",
		OccurredAt: at, CorrelationID: "c0ffee00-1111-4222-8333-944455556666", Actor: "key:3e4f5a6b",
		Data: data,
	})
	require.NoError(tb, err)
	return payload
}

// fastSeeds are envelopes the fast path must understand.
var fastSeeds = []string{
	`{"event_id":"e1","type":"OrderCancelled","stream_type":"order","stream_id":"s1","version":2,"merchant_id":"m1","occurred_at":"2026-11-30T10:00:00Z","correlation_id":"c","actor":"key:k","data":{"from":"pending","reason":"x"}}`,
	// Postgres jsonb's re-serialisation: spaces after colons and commas.
	`{"data": {"from": "pending", "reason": "a \"quoted\" \\ reason", "n": [1, -2.5e+3, true, false, null, {}]}, "type": "OrderCancelled", "actor": "key:k", "version": 12, "event_id": "e1", "stream_id": "s1", "merchant_id": "m1", "occurred_at": "2026-11-30T10:00:00.123456Z", "stream_type": "order", "causation_id": "c0", "correlation_id": "c"}`,
	" \n\t{ \"event_id\" : \"é—ü\" ,\r\n \"type\":\"T\",\"stream_type\":\"x\",\"stream_id\":\"s\",\"version\":1,\"merchant_id\":\"m\",\"occurred_at\":\"2026-11-30T10:00:00+02:00\",\"data\":\"\\u00e9\"} \n",
	// Unknown members are skipped, whatever their value.
	`{"event_id":"e1","extra":{"a":[{"b":"}\"]"}]},"type":"T","stream_type":"x","stream_id":"s","version":1,"more":-0.5,"merchant_id":"m","occurred_at":"2026-11-30T10:00:00Z","data":[]}`,
	// Missing members: Unmarshal rejects them after the parse.
	`{"type":"T","data":{}}`,
	`{}`,
	`{"event_id":"e1","version":-3}`,
}

// fallbackSeeds are payloads the fast path must leave to encoding/json.
var fallbackSeeds = []string{
	`{"event_id":"e\u0031","type":"T","stream_type":"x","stream_id":"s","version":1,"merchant_id":"m","occurred_at":"2026-11-30T10:00:00Z","data":{}}`,
	`{"event_id":"e1","event_id":"e2","type":"T","stream_type":"x","stream_id":"s","version":1,"merchant_id":"m","occurred_at":"2026-11-30T10:00:00Z","data":{}}`,
	`{"Event_ID":"e1","type":"T","stream_type":"x","stream_id":"s","version":1,"merchant_id":"m","occurred_at":"2026-11-30T10:00:00Z","data":{}}`,
	"{\"event_id\":\"e1\",\"type\":\"T\",\"stream_type\":\"x\",\"stream_id\":\"s\",\"version\":1,\"merchant_id\":\"m\",\"occurred_at\":\"2026-11-30T10:00:00Z\",\"data\":{},\"\u212a\":1}",
	`{"event_id":null,"type":"T","stream_type":"x","stream_id":"s","version":1,"merchant_id":"m","occurred_at":"2026-11-30T10:00:00Z","data":{}}`,
	`{"event_id":"e1","type":"T","stream_type":"x","stream_id":"s","version":1.0,"merchant_id":"m","occurred_at":"2026-11-30T10:00:00Z","data":{}}`,
	`{"event_id":"e1","type":"T","stream_type":"x","stream_id":"s","version":"1","merchant_id":"m","occurred_at":"2026-11-30T10:00:00Z","data":{}}`,
	`{"event_id":"e1","type":"T","stream_type":"x","stream_id":"s","version":99999999999999999999,"merchant_id":"m","occurred_at":"2026-11-30T10:00:00Z","data":{}}`,
	`{"event_id":"e1","type":"T","stream_type":"x","stream_id":"s","version":01,"merchant_id":"m","occurred_at":"2026-11-30T10:00:00Z","data":{}}`,
	`{"event_id":"e1","type":"T","stream_type":"x","stream_id":"s","version":1,"merchant_id":"m","occurred_at":"2026-11-30 10:00:00Z","data":{}}`,
	`{"event_id":"e1","type":"T","stream_type":"x","stream_id":"s","version":1,"merchant_id":"m","occurred_at":null,"data":{}}`,
	`{"event_id":"e1","type":"T","stream_type":"x","stream_id":"s","version":1,"merchant_id":"m","occurred_at":"2026-11-30T10:00:00Z","data":null}`,
	`{"event_id":"e1","type":"T","stream_type":"x","stream_id":"s","version":1,"merchant_id":"m","occurred_at":"2026-11-30T10:00:00Z","data":{"a":"\x"}}`,
	`{"event_id":"e1","type":"T","stream_type":"x","stream_id":"s","version":1,"merchant_id":"m","occurred_at":"2026-11-30T10:00:00Z","data":{"a":01}}`,
	`{"event_id":"e1","type":"T","stream_type":"x","stream_id":"s","version":1,"merchant_id":"m","occurred_at":"2026-11-30T10:00:00Z","data":{"a":1,}}`,
	`{"event_id":"e1","type":"T","stream_type":"x","stream_id":"s","version":1,"merchant_id":"m","occurred_at":"2026-11-30T10:00:00Z","data":{"a" 1}}`,
	`{"event_id":"e1","type":"T","stream_type":"x","stream_id":"s","version":1,"merchant_id":"m","occurred_at":"2026-11-30T10:00:00Z","data":{}}x`,
	`{"event_id":"e1","type":"T","stream_type":"x","stream_id":"s","version":1,"merchant_id":"m","occurred_at":"2026-11-30T10:00:00Z","data":{}`,
	"{\"event_id\":\"e\xff\",\"type\":\"T\",\"stream_type\":\"x\",\"stream_id\":\"s\",\"version\":1,\"merchant_id\":\"m\",\"occurred_at\":\"2026-11-30T10:00:00Z\",\"data\":{}}",
	"{\"event_id\":\"e\t1\",\"type\":\"T\",\"stream_type\":\"x\",\"stream_id\":\"s\",\"version\":1,\"merchant_id\":\"m\",\"occurred_at\":\"2026-11-30T10:00:00Z\",\"data\":{}}",
	`[]`, `null`, `"x"`, ``,
}

// The fast path reads the envelopes Hearth writes, and reads them as
// encoding/json does.
func TestParseEnvelopeReadsWhatEncodingJSONReads(t *testing.T) {
	for _, p := range append(fastSeeds, string(realistic(t))) {
		got, ok := parseEnvelope([]byte(p))
		require.True(t, ok, p)
		var want Envelope
		require.NoError(t, json.Unmarshal([]byte(p), &want), p)
		require.Equal(t, want, got, p)
	}
}

// Whatever the fast path does not fully understand, it leaves to
// encoding/json; Unmarshal's result and error stay encoding/json's.
func TestParseEnvelopeLeavesTheRestToEncodingJSON(t *testing.T) {
	for _, p := range fallbackSeeds {
		_, ok := parseEnvelope([]byte(p))
		require.False(t, ok, p)
		requireSameUnmarshal(t, []byte(p))
	}
}

func requireSameUnmarshal(t *testing.T, payload []byte) {
	t.Helper()
	got, gotErr := Unmarshal(payload, decodeRaw)
	want, wantErr := referenceUnmarshal(payload, decodeRaw)
	if wantErr != nil {
		require.EqualError(t, gotErr, wantErr.Error(), "%q", payload)
		return
	}
	require.NoError(t, gotErr, "%q", payload)
	require.True(t, reflect.DeepEqual(want, got), "%q:\n%#v\n%#v", payload, want, got)
}

// The fast path accepts a payload only when encoding/json does, and then
// decodes the same envelope; with the fallback, Unmarshal returns exactly
// what it returned with encoding/json alone.
func FuzzUnmarshalMatchesEncodingJSON(f *testing.F) {
	f.Add(realistic(f))
	for _, p := range append(fastSeeds, fallbackSeeds...) {
		f.Add([]byte(p))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		if env, ok := parseEnvelope(payload); ok {
			var want Envelope
			require.NoError(t, json.Unmarshal(payload, &want), "%q", payload)
			require.True(t, reflect.DeepEqual(want, env), "%q:\n%#v\n%#v", payload, want, env)
		}
		requireSameUnmarshal(t, payload)
	})
}

func nothing(string, []byte, ...[]byte) (Event, error) { return nil, nil }

// BenchmarkUnmarshal compares Unmarshal with its encoding/json path on an
// envelope as the store writes it, the typed decode left out.
func BenchmarkUnmarshal(b *testing.B) {
	payload := realistic(b)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Unmarshal(payload, nothing); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := referenceUnmarshal(payload, nothing); err != nil {
				b.Fatal(err)
			}
		}
	})
}
