package projector

import (
	"testing"
	"time"
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
