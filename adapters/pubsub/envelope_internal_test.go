package pubsub

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/event"
	"hearth/domain/uuid"
)

// The topic message's payload is the envelope as json.Marshal writes it,
// its data spliced in rather than encoded again.
func TestMarshalEnvelopeIsTheEnvelopesJSON(t *testing.T) {
	env := event.Envelope{ID: uuid.New(), Type: "order.created", StreamType: "order", StreamID: uuid.New(), Version: 3,
		MerchantID: uuid.New(), OccurredAt: time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC), CorrelationID: "c<1>",
		Actor: "key:x", Data: json.RawMessage(`{"notes":"a \"quoted\" <b>","amount_cents":100,"nested":{"x":[1,2]}}`)}
	for _, causation := range []string{"", uuid.New()} {
		env.CausationID = causation
		want, err := json.Marshal(env)
		require.NoError(t, err)
		got, err := marshalEnvelope(env)
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(got))
		var back event.Envelope
		require.NoError(t, json.Unmarshal(got, &back))
		require.Equal(t, env.Data, back.Data)
	}
	_, err := marshalEnvelope(event.Envelope{ID: uuid.New()})
	require.Error(t, err, "no data")
}
