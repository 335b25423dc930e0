package natsserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"hearth/internal/natstest"
)

// A restart keeps the port and the JetStream store: a stream and its
// messages survive it, and a client with reconnects carries on.
func TestRestartKeepsPortAndStore(t *testing.T) {
	t.Parallel()
	s := natstest.Start(t)
	nc, err := nats.Connect(s.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	require.NoError(t, err)
	defer nc.Close()
	js, err := nc.JetStream()
	require.NoError(t, err)
	_, err = js.AddStream(&nats.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: nats.FileStorage})
	require.NoError(t, err)
	_, err = js.Publish("t.a", []byte("one"))
	require.NoError(t, err)

	require.NoError(t, s.Restart(context.Background()))

	require.Eventually(t, func() bool {
		_, err := js.Publish("t.a", []byte("two"))
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	info, err := js.StreamInfo("T")
	require.NoError(t, err)
	require.EqualValues(t, 2, info.State.Msgs)
}
