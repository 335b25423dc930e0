package event_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/domain/event"
	"hearth/domain/order"
)

// Events read back from the store are validated: anything missing is an
// error naming it, never zero values applied.
func TestUnmarshalRejectsIncompleteEnvelopes(t *testing.T) {
	valid := `{"event_id":"e1","type":"OrderCancelled","stream_type":"order","stream_id":"s1","version":2,
		"merchant_id":"m1","occurred_at":"2026-11-30T10:00:00Z","correlation_id":"c","actor":"key:k",
		"data":{"from":"pending","reason":"x"}}`
	r, err := event.Unmarshal([]byte(valid), order.Decode)
	require.NoError(t, err)
	require.Equal(t, order.Cancelled{From: order.StatusPending, Reason: "x"}, r.Event)

	for name, payload := range map[string]string{
		"not json":       `{`,
		"no event id":    `{"type":"OrderCancelled","stream_type":"order","stream_id":"s1","version":1,"merchant_id":"m1","occurred_at":"2026-11-30T10:00:00Z","data":{}}`,
		"no stream id":   `{"event_id":"e1","type":"OrderCancelled","stream_type":"order","version":1,"merchant_id":"m1","occurred_at":"2026-11-30T10:00:00Z","data":{}}`,
		"zero version":   `{"event_id":"e1","type":"OrderCancelled","stream_type":"order","stream_id":"s1","version":0,"merchant_id":"m1","occurred_at":"2026-11-30T10:00:00Z","data":{}}`,
		"no merchant":    `{"event_id":"e1","type":"OrderCancelled","stream_type":"order","stream_id":"s1","version":1,"occurred_at":"2026-11-30T10:00:00Z","data":{}}`,
		"no time":        `{"event_id":"e1","type":"OrderCancelled","stream_type":"order","stream_id":"s1","version":1,"merchant_id":"m1","data":{}}`,
		"unknown type":   `{"event_id":"e1","type":"OrderExploded","stream_type":"order","stream_id":"s1","version":1,"merchant_id":"m1","occurred_at":"2026-11-30T10:00:00Z","data":{}}`,
		"corrupt data":   `{"event_id":"e1","type":"OrderCancelled","stream_type":"order","stream_id":"s1","version":1,"merchant_id":"m1","occurred_at":"2026-11-30T10:00:00Z","data":{"reason":5}}`,
		"no stream type": `{"event_id":"e1","type":"OrderCancelled","stream_id":"s1","version":1,"merchant_id":"m1","occurred_at":"2026-11-30T10:00:00Z","data":{}}`,
	} {
		_, err := event.Unmarshal([]byte(payload), order.Decode)
		require.Error(t, err, name)
	}
}
