package relay_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// The stream disappears while the relay leads (deleted by an operator, or
// a NATS server back on an empty store): publishing fails ("no
// responders"), and the relay creates the stream again, as at a term's
// start, and relays what follows in the same term.
func TestRelayRecreatesAStreamDeletedMidTerm(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	in := f.startInstance(t, "a", f.config())
	f.write(2).wait(t)
	f.requireAllRelayed(t)

	require.NoError(t, f.js.DeleteStream(stream))
	f.write(1).wait(t) // one more order: created, then three status changes
	require.Eventually(t, func() bool { return gatherSum(t, in.reg, "hearth_relay_failures_total") > 0 }, 30*time.Second,
		5*time.Millisecond, "publishing to the deleted stream fails")
	back := assert.Eventually(t, func() bool { return f.streamCount() >= 4 }, 30*time.Second, 20*time.Millisecond)
	require.True(t, back, "the stream should be back with the 4 events written after it was deleted; after 30 s: %d messages, "+
		"%v publish failures, the relay still leading: %v", f.streamCount(), gatherSum(t, in.reg, "hearth_relay_failures_total"), in.leads())
}

// An event without a public form (its stored type no longer decodes) holds
// the relay's topic until the operator skips it (app parked skip, table
// skipped_events): the relay then publishes it as the event feed shows it,
// order.event_skipped, and goes on.
func TestRelayGoesOnPastASkippedEvent(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	bad := f.CreateOrder(t)
	good := f.CreateOrder(t) // behind it in the orders topic
	var badID string
	require.NoError(t, f.ES.DB.QueryRow(`UPDATE events SET type = 'OrderTeleported' WHERE stream_id = $1 RETURNING event_id::text`, bad).Scan(&badID))
	res, err := f.ES.DB.Exec(`UPDATE watermill_orders SET payload = jsonb_set(payload::jsonb, '{type}', '"OrderTeleported"')::json
		WHERE payload->>'event_id' = $1`, badID)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the topic message of the bad event")
	in := f.startInstance(t, "a", f.config())
	require.Eventually(t, func() bool { return gatherSum(t, in.reg, "hearth_relay_failures_total") > 0 }, 30*time.Second,
		5*time.Millisecond, "the bad event fails to encode")
	require.Zero(t, f.streamCount(), "the topic is held at the bad event")
	// The operator skips it, as docs/operations.md (parked aggregates) says.
	_, err = f.ES.DB.Exec(`INSERT INTO skipped_events (projection, event_id, stream_id, version, type, skipped_by, reason)
		VALUES ('orders', $1, $2, 1, 'OrderTeleported', 'key:test', 'no such event')`, badID, bad)
	require.NoError(t, err)
	relayed := func() bool {
		for _, m := range f.messagesIfAny(t) {
			if m.streamID == good {
				return true
			}
		}
		return false
	}
	ok := assert.Eventually(t, relayed, 20*time.Second, 20*time.Millisecond)
	require.True(t, ok, "the order after the skipped event should reach the stream; after 20 s the stream holds %d messages "+
		"and the relay counted %v failures", f.streamCount(), gatherSum(t, in.reg, "hearth_relay_failures_total"))
	var skipped []string
	for _, m := range f.messages(t) {
		if m.streamID == bad {
			skipped = append(skipped, strings.SplitN(m.subject, ".", 3)[2]) // prefix.merchant.<aggregate>.<change>
		}
	}
	require.Equal(t, []string{"order.event_skipped"}, skipped, "the skipped event, as the event feed shows it")
}

// messagesIfAny is messages, or none before the stream exists.
func (f *fixture) messagesIfAny(t *testing.T) []relayed {
	if _, err := f.js.StreamInfo(stream); err != nil {
		return nil
	}
	return f.messages(t)
}

// An existing stream keeps the operator's limits (docs/operations.md); the
// relay sets its duplicate window to RELAY_DUPLICATE_WINDOW, which
// JetStream refuses beyond the stream's max_age: for a stream that keeps
// its messages less long, the window is its max age, and events flow.
func TestRelayPublishesToAStreamWithAShortMaxAge(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	cfg := nats.StreamConfig{Name: stream, Subjects: []string{"hearth.>"}, Storage: nats.FileStorage,
		MaxAge: 5 * time.Minute, Duplicates: time.Minute}
	_, err := f.js.AddStream(&cfg)
	require.NoError(t, err)
	// The premise: JetStream refuses the relay's window on this stream.
	longer := cfg
	longer.Duplicates = f.config().DuplicateWindow
	_, err = f.js.UpdateStream(&longer)
	require.ErrorContains(t, err, "duplicates window can not be larger")
	f.write(1).wait(t)
	in := f.startInstance(t, "a", f.config())
	ok := assert.Eventually(t, func() bool { return f.streamCount() >= 4 }, 20*time.Second, 20*time.Millisecond)
	require.True(t, ok, "the order's 4 events should reach the stream; after 20 s it holds %d, and the relay counted %v failures",
		f.streamCount(), gatherSum(t, in.reg, "hearth_relay_failures_total"))
}
