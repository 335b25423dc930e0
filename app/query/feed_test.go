package query

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"hearth/app/publicevent"
	"hearth/domain/event"
	"hearth/domain/order"
)

func TestFeedCursorRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range []FeedCursor{{Transaction: 1, Position: 1}, {Transaction: 734, Position: 1842}, {Transaction: 1<<64 - 1, Position: 1<<63 - 1}} {
		s := c.String()
		got, err := ParseFeedCursor(s)
		if err != nil || got != c {
			t.Errorf("ParseFeedCursor(%q) = %v, %v; want %v", s, got, err, c)
		}
		if strings.ContainsAny(s, "+/=%&?#") {
			t.Errorf("cursor %q is not URL-safe", s)
		}
	}
	if got, err := ParseFeedCursor(""); err != nil || got != (FeedCursor{}) {
		t.Errorf(`ParseFeedCursor("") = %v, %v; want the start`, got, err)
	}
	if s := (FeedCursor{}).String(); s != "" {
		t.Errorf("the start encodes as %q", s)
	}
}

// A cursor is accepted only exactly as String wrote it.
func TestFeedCursorStrict(t *testing.T) {
	t.Parallel()
	good := FeedCursor{Transaction: 734, Position: 1842}.String()
	raw := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	valid, _ := base64.RawURLEncoding.DecodeString(good)
	otherVersion := append([]byte{2}, valid[1:]...)
	zeroTx := append([]byte{1}, make([]byte, 16)...)
	zeroTx[16] = 5
	for name, s := range map[string]string{
		"garbage":                 "not a cursor",
		"a position":              "1842",
		"truncated":               good[:len(good)-1],
		"longer":                  good + "A",
		"padded":                  good + "=",
		"standard base64":         strings.NewReplacer("-", "+", "_", "/").Replace(good) + "+",
		"with a line break":       good[:10] + "\n" + good[10:],
		"another version":         raw(otherVersion),
		"no transaction":          raw(zeroTx),
		"non-zero trailing bits":  good[:len(good)-1] + string(good[len(good)-1]+1),
		"negative position":       FeedCursor{Transaction: 7, Position: -1}.String(),
		"with surrounding spaces": " " + good,
	} {
		if c, err := ParseFeedCursor(s); !errors.Is(err, ErrMalformedCursor) {
			t.Errorf("%s: ParseFeedCursor(%q) = %v, %v; want ErrMalformedCursor", name, s, c, err)
		}
	}
}

func FuzzParseFeedCursor(f *testing.F) {
	f.Add(FeedCursor{Transaction: 734, Position: 1842}.String())
	f.Add("")
	f.Add("AQAAAAAAAALeAAAAAAAABzI")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseFeedCursor(s)
		if err != nil {
			return
		}
		if c.String() != s {
			t.Fatalf("ParseFeedCursor(%q) = %v, which encodes as %q", s, c, c.String())
		}
	})
}

// memFeed is a merchant's feed in memory: the store and the watch.
type memFeed struct {
	mu      sync.Mutex
	entries []FeedEntry
	reads   int
	changed chan struct{}
	watches int
	read    chan struct{} // gets a value after each Page, when set
}

func newMemFeed() *memFeed { return &memFeed{changed: make(chan struct{})} }

func (m *memFeed) add(e event.Event, typ string, corrupt bool) FeedCursor {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := int64(len(m.entries) + 1)
	c := FeedCursor{Transaction: uint64(100 + n), Position: n}
	entry := FeedEntry{Cursor: c, Stored: publicevent.Stored{Position: n, Recorded: event.Recorded{
		Envelope: event.Envelope{ID: "e" + string(rune('a'+n)), Type: typ, StreamType: order.StreamType,
			StreamID: "o1", Version: int(n), MerchantID: "m1", OccurredAt: time.Unix(int64(n), 0)},
		Event: e,
	}}}
	if corrupt {
		entry.Stored.Event, entry.Err = nil, errors.New("payload does not decode")
	}
	m.entries = append(m.entries, entry)
	close(m.changed)
	m.changed = make(chan struct{})
	return c
}

func (m *memFeed) Page(_ context.Context, _ string, after FeedCursor, n int) ([]FeedEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	if m.read != nil {
		defer func() { m.read <- struct{}{} }()
	}
	var out []FeedEntry
	for _, e := range m.entries {
		if (e.Cursor.Transaction > after.Transaction || e.Cursor.Transaction == after.Transaction && e.Cursor.Position > after.Position) && len(out) < n {
			out = append(out, e)
		}
	}
	return out, nil
}

// Holds: the cursors of the stored entries.
func (m *memFeed) Holds(_ context.Context, c FeedCursor) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.ContainsFunc(m.entries, func(e FeedEntry) bool { return e.Cursor == c }), nil
}

func (m *memFeed) Watch(string) (<-chan struct{}, func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.watches++
	return m.changed, func() {
		m.mu.Lock()
		m.watches--
		m.mu.Unlock()
	}
}

func created() event.Event {
	return order.Created{CustomerID: "c1", AmountCents: 100, Status: order.StatusPending}
}
func confirmed() event.Event {
	return order.StatusChanged{From: order.StatusPending, To: order.StatusConfirmed}
}

func newTestFeed(t *testing.T, m *memFeed) Feed {
	t.Helper()
	f, err := NewFeed(m, m)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func types(p FeedPage) []string {
	var out []string
	for _, e := range p.Events {
		out = append(out, e.Type)
	}
	return out
}

// A filtered read moves its cursor past the events it left out, so the
// next read does not look at them again; an empty filtered page says where
// it got to.
func TestFeedTypesMoveTheCursorPastWhatTheyLeaveOut(t *testing.T) {
	t.Parallel()
	m := newMemFeed()
	f := newTestFeed(t, m)
	m.add(created(), "OrderCreated", false)
	last := m.add(confirmed(), "OrderStatusChanged", false)
	page, err := f.Read(t.Context(), "m1", FeedRequest{Types: []string{publicevent.OrderCancelled}, Limit: 10})
	if err != nil || len(page.Events) != 0 || page.Next != last {
		t.Fatalf("Read = %v (next %v), %v; want no event and the cursor of the last event looked at, %v", types(page), page.Next, err, last)
	}
	page, err = f.Read(t.Context(), "m1", FeedRequest{Types: []string{publicevent.OrderStatusChanged}, Limit: 10})
	if err != nil || len(page.Events) != 1 || page.Events[0].Cursor != last || page.Next != last {
		t.Fatalf("Read = %v (next %v), %v", types(page), page.Next, err)
	}
}

// A cursor that names no stored event (its event lost in a restore, or made
// up) is refused, also when events follow its place: read as a place, it
// would leave out the events that sort before it, for good.
func TestFeedRefusesACursorOfNoStoredEvent(t *testing.T) {
	t.Parallel()
	m := newMemFeed()
	f := newTestFeed(t, m)
	first := m.add(created(), "OrderCreated", false)
	m.add(confirmed(), "OrderStatusChanged", false)
	if page, err := f.Read(t.Context(), "m1", FeedRequest{After: first, Limit: 10}); err != nil || len(page.Events) != 1 {
		t.Fatalf("Read after a stored event's cursor = %v, %v; want its next event", types(page), err)
	}
	gone := FeedCursor{Transaction: first.Transaction, Position: first.Position + 100}
	for _, wait := range []time.Duration{0, time.Hour} {
		if page, err := f.Read(t.Context(), "m1", FeedRequest{After: gone, Limit: 10, Wait: wait}); !errors.Is(err, ErrUnknownCursor) {
			t.Fatalf("Read after %v (wait %v) = %v, %v; want ErrUnknownCursor", gone, wait, types(page), err)
		}
	}
}

// A filtered read looks at feedScans pages at most, then answers (empty,
// with the cursor where it got to) rather than scanning on.
func TestFeedFilteredReadIsBounded(t *testing.T) {
	t.Parallel()
	m := newMemFeed()
	f := newTestFeed(t, m)
	for range feedScan*feedScans + 5 {
		m.add(created(), "OrderCreated", false)
	}
	page, err := f.Read(t.Context(), "m1", FeedRequest{Types: []string{publicevent.OrderCancelled}, Limit: 10, Wait: time.Hour})
	if err != nil || len(page.Events) != 0 {
		t.Fatalf("Read = %v, %v", types(page), err)
	}
	if want := (FeedCursor{Transaction: 100 + feedScan*feedScans, Position: feedScan * feedScans}); page.Next != want || m.reads != feedScans {
		t.Fatalf("next %v after %d reads; want %v after %d", page.Next, m.reads, want, feedScans)
	}
}

// The feed answers the events before one it cannot publish, and then the
// error naming it; it never skips it.
func TestFeedStopsBeforeAnUnpublishableEvent(t *testing.T) {
	t.Parallel()
	m := newMemFeed()
	f := newTestFeed(t, m)
	first := m.add(created(), "OrderCreated", false)
	m.add(nil, "OrderTeleported", true)
	m.add(confirmed(), "OrderStatusChanged", false)
	page, err := f.Read(t.Context(), "m1", FeedRequest{Limit: 10})
	if err != nil || len(page.Events) != 1 || page.Next != first {
		t.Fatalf("Read = %v (next %v), %v; want the first event only", types(page), page.Next, err)
	}
	for _, req := range []FeedRequest{{After: first, Limit: 10}, {After: first, Limit: 10, Types: []string{publicevent.OrderStatusChanged}}} {
		_, err = f.Read(t.Context(), "m1", req)
		var unpublishable *UnpublishableEventError
		if !errors.As(err, &unpublishable) || unpublishable.EventID != m.entries[1].Stored.ID || unpublishable.Position != 2 {
			t.Fatalf("Read(%+v) = %v; want an UnpublishableEventError naming the second event", req, err)
		}
	}
}

// A read with nothing new waits until the watch fires and then answers
// what came; one that waits in vain answers its cursor.
func TestFeedWaits(t *testing.T) {
	t.Parallel()
	m := newMemFeed()
	f := newTestFeed(t, m)
	start := m.add(created(), "OrderCreated", false)
	m.read = make(chan struct{}, 1)
	got := make(chan FeedPage, 1)
	go func() {
		page, err := f.Read(context.Background(), "m1", FeedRequest{After: start, Limit: 10, Wait: time.Hour})
		if err != nil {
			t.Error(err)
		}
		got <- page
	}()
	<-m.read // it found nothing and waits
	next := m.add(confirmed(), "OrderStatusChanged", false)
	<-m.read
	page := <-got
	m.read = nil
	if len(page.Events) != 1 || page.Next != next || page.Events[0].Type != publicevent.OrderStatusChanged {
		t.Fatalf("Read = %v (next %v)", types(page), page.Next)
	}

	stop := make(chan struct{})
	close(stop)
	page, err := f.Read(t.Context(), "m1", FeedRequest{After: next, Limit: 10, Wait: time.Hour, Stop: stop})
	if err != nil || len(page.Events) != 0 || page.Next != next {
		t.Fatalf("a stopped wait: Read = %v (next %v), %v", types(page), page.Next, err)
	}
	page, err = f.Read(t.Context(), "m1", FeedRequest{After: next, Limit: 10, Wait: time.Millisecond})
	if err != nil || len(page.Events) != 0 || page.Next != next {
		t.Fatalf("a wait in vain: Read = %v (next %v), %v", types(page), page.Next, err)
	}
}

func TestFeedLimit(t *testing.T) {
	t.Parallel()
	m := newMemFeed()
	f := newTestFeed(t, m)
	second := FeedCursor{}
	for i := range 5 {
		c := m.add(created(), "OrderCreated", false)
		if i == 1 {
			second = c
		}
	}
	page, err := f.Read(t.Context(), "m1", FeedRequest{Limit: 2, Wait: time.Hour})
	if err != nil || len(page.Events) != 2 || page.Next != second {
		t.Fatalf("Read = %v (next %v), %v", types(page), page.Next, err)
	}
}

// passing is an error that says a retry may succeed (the vault's failed
// lookup of a data key: a failover, a timeout).
type passing struct{ error }

func (passing) Temporary() bool { return true }

// An event whose public form could not be built for a passing reason (its
// data key could not be read just now) is no unpublishable event: the read
// answers the events before it, and from just before it the error itself,
// which the client retries. Answered as an UnpublishableEventError, it
// told the client and the operator (logged at error) that the event has no
// public form, to be fixed by a deploy or skipped, though it is sound.
func TestFeedDoesNotCallAPassingFailureUnpublishable(t *testing.T) {
	t.Parallel()
	m := newMemFeed()
	f := newTestFeed(t, m)
	first := m.add(created(), "OrderCreated", false)
	m.add(confirmed(), "OrderStatusChanged", false)
	m.mu.Lock()
	m.entries[1].Stored.Event, m.entries[1].Err = nil, passing{errors.New("read the data key of subject c1: connection refused")}
	m.mu.Unlock()
	page, err := f.Read(t.Context(), "m1", FeedRequest{Limit: 10})
	if err != nil || len(page.Events) != 1 || page.Next != first {
		t.Fatalf("Read = %v (next %v), %v; want the first event only", types(page), page.Next, err)
	}
	_, err = f.Read(t.Context(), "m1", FeedRequest{After: first, Limit: 10})
	var unpublishable *UnpublishableEventError
	var temporary interface{ Temporary() bool }
	if errors.As(err, &unpublishable) || !errors.As(err, &temporary) || !temporary.Temporary() {
		t.Fatalf("Read after the first = %v; want the passing error itself, not an UnpublishableEventError", err)
	}
}
