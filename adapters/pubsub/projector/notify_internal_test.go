package projector

import (
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"
)

// After a notification, the re-polls start at 1 ms and double, but never
// wait longer than a second (nor the fallback): a notified message hidden by
// an old transaction elsewhere in the cluster is read within a second of
// becoming visible, whatever the fallback.
func TestQuickRepollsAreCapped(t *testing.T) {
	for _, fallback := range []time.Duration{time.Hour, 250 * time.Millisecond} {
		b := &Repoll{fallback: fallback, quick: time.Millisecond}
		var waits []time.Duration
		for range 20 {
			waits = append(waits, b.nextWait())
		}
		if waits[0] != time.Millisecond || waits[1] != 2*time.Millisecond {
			t.Errorf("fallback %v: re-polls start %v, want 1ms, 2ms", fallback, waits[:2])
		}
		limit := min(fallback, time.Second)
		for i, w := range waits {
			if w > limit {
				t.Fatalf("fallback %v: re-poll %d waits %v, more than %v: %v", fallback, i, w, limit, waits)
			}
		}
		if last := waits[len(waits)-1]; last != limit {
			t.Errorf("fallback %v: re-polls settle at %v, want %v", fallback, last, limit)
		}
		b.quick = 0
		if w := b.nextWait(); w != fallback {
			t.Errorf("without a notification the wait is %v, want the fallback %v", w, fallback)
		}
	}
}

// A notification that comes while a read finds messages is not lost: if the
// next read finds nothing (the notified message still hidden), the reader
// re-reads quickly, not after the fallback. (The relay's test with a
// one-hour fallback waited an hour when this was lost.)
func TestNotificationDuringAFindingReadIsKept(t *testing.T) {
	n := &Notifier{signals: map[string]chan struct{}{}}
	var waits []time.Duration
	timer := recordingTimer(&waits)
	r := NewRepoll(n, "orders", time.Hour, timer)

	n.wake(topicTable("orders")) // during a read that finds messages
	r.Found(false)
	r.Wait(nil) // the next read found nothing
	if len(waits) != 1 || waits[0] > time.Second {
		t.Fatalf("after a notification during a finding read, the empty read waits %v; want a quick re-read (at most 1s)", waits)
	}

	r.Found(false) // a finding read with no notification during it
	waits = nil
	r.Wait(nil)
	if len(waits) != 1 || waits[0] != time.Hour {
		t.Fatalf("without a notification the empty read waits %v; want the fallback", waits)
	}
}

// After a read that found messages, the empty read that may follow waits
// for quick re-reads when a notification came during it or it reported
// messages hidden behind it; otherwise for the fallback.
func TestFoundWaitsQuicklyWhileMessagesAreHidden(t *testing.T) {
	for _, c := range []struct {
		name             string
		hidden, notified bool
		wait             time.Duration
	}{
		{name: "nothing hidden", wait: time.Hour},
		{name: "messages hidden", hidden: true, wait: time.Millisecond},
		{name: "a notification during the read", notified: true, wait: time.Millisecond},
	} {
		n := &Notifier{signals: map[string]chan struct{}{}}
		var waits []time.Duration
		timer := recordingTimer(&waits)
		r := NewRepoll(n, "orders", time.Hour, timer)
		if c.notified {
			n.wake(topicTable("orders"))
		}
		r.Found(c.hidden)
		r.Wait(nil) // the next read found nothing
		if len(waits) != 1 || waits[0] != c.wait {
			t.Errorf("%s: waits %v, want %v", c.name, waits, c.wait)
		}
	}
}

// A notification that comes as a read that found messages ends, between
// the look at the read's signal and the take of the next, is not lost: if
// the next read finds nothing (its message still hidden), quick re-reads
// follow, not the fallback. The interleaving is forced, not raced: the
// test holds the notifier's lock until Found waits for it, and delivers
// the notification as wake does, under that lock.
func TestNotificationAsAFindingReadEndsIsNotLost(t *testing.T) {
	n := &Notifier{signals: map[string]chan struct{}{}}
	var waits []time.Duration
	timer := recordingTimer(&waits)
	r := NewRepoll(n, "orders", time.Hour, timer)

	n.mu.Lock()
	found := make(chan struct{})
	go func() { r.Found(false); close(found) }()
	require.Eventually(t, waitsForNotifier, 10*time.Second, time.Millisecond, "Found never asked the notifier")
	n.wakeLocked(topicTable("orders"))
	n.mu.Unlock()
	<-found

	r.Wait(nil) // the next read found nothing
	require.Equal(t, []time.Duration{time.Millisecond}, waits, "the notification is lost: the empty read waits for the fallback")
}

// waitsForNotifier reports whether a goroutine waits in Found for the
// notifier's lock.
func waitsForNotifier() bool {
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "sync.(*Mutex).Lock") && strings.Contains(g, "(*Notifier).") && strings.Contains(g, "(*Repoll).Found") {
			return true
		}
	}
	return false
}

// recordingTimer is a Repoll timer that fires at once and notes each wait
// in waits.
func recordingTimer(waits *[]time.Duration) Timer {
	return func(d time.Duration) (<-chan time.Time, func() bool) {
		*waits = append(*waits, d)
		c := make(chan time.Time, 1)
		c <- time.Time{}
		return c, func() bool { return true }
	}
}

// A poll that read fewer messages than a batch, none of them hidden behind
// an older transaction, and acked them all has read everything there was:
// the subscriber waits (for a notification, or the fallback) rather than
// polling again at once to find nothing. A full batch, a message left
// unacked (its ack deadline passed), messages hidden, or a notification
// during the poll have it poll again at once, as before.
func TestAPollThatReadEverythingWaits(t *testing.T) {
	for _, c := range []struct {
		name     string
		read     lastRead
		notified bool
		waits    []time.Duration
	}{
		{name: "read everything", read: lastRead{rows: 3, last: 7, acked: 7}, waits: []time.Duration{time.Hour}},
		{name: "a full batch", read: lastRead{rows: 100, last: 7, acked: 7}},
		{name: "the last message unacked", read: lastRead{rows: 3, last: 7, acked: 6}},
		{name: "nothing acked", read: lastRead{rows: 3, last: 7}},
		{name: "messages hidden", read: lastRead{rows: 3, last: 7, acked: 7, hidden: true}},
		{name: "a notification during the poll", read: lastRead{rows: 3, last: 7, acked: 7}, notified: true},
	} {
		n := &Notifier{signals: map[string]chan struct{}{}}
		var waits []time.Duration
		read := c.read
		b := &notifyBackoff{wait: NewRepoll(n, "orders", time.Hour, recordingTimer(&waits)), read: &read, batch: 100, retry: time.Second}
		if c.notified {
			n.wake(topicTable("orders"))
		}
		if got := b.HandleError(watermill.NopLogger{}, false, nil); got != 0 {
			t.Errorf("%s: backs off %v, want 0", c.name, got)
		}
		if !slices.Equal(waits, c.waits) {
			t.Errorf("%s: waits %v before the next poll, want %v", c.name, waits, c.waits)
		}
	}
}
