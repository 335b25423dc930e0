package query

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"hearth/app/publicevent"
)

// The event feed (GET /v1/events): a merchant's events in their public
// form, in commit order, from a cursor the client keeps.
//
// The order is that of watermill-sql v3's topics: by the id of the
// transaction that wrote an event, then by its position, and only events of
// transactions older than every transaction still running. Positions alone
// would not do: a position is taken when the event is inserted, so a
// transaction holding a lower position can commit after one holding a
// higher one, and a reader that had moved past the higher one would never
// see the lower. Below the oldest running transaction nothing can appear
// any more (a new transaction always gets a higher id), so a page read
// there is final: the same cursor always continues with the same events,
// whatever restarted, deployed or changed leadership in between.

// FeedCursor is a place in a merchant's feed: just after the event of
// transaction Transaction at position Position. The zero cursor is the
// feed's start.
type FeedCursor struct {
	Transaction uint64
	Position    int64
}

// cursorVersion opens every encoded cursor, so that another encoding can
// be told apart later.
const cursorVersion = 1

// cursorBytes is an encoded cursor's length before base64: the version,
// then the transaction id and the position, big-endian.
const cursorBytes = 1 + 8 + 8

// String is the cursor as clients see it: opaque, URL-safe, "" for the
// start.
func (c FeedCursor) String() string {
	if c == (FeedCursor{}) {
		return ""
	}
	var b [cursorBytes]byte
	b[0] = cursorVersion
	binary.BigEndian.PutUint64(b[1:], c.Transaction)
	binary.BigEndian.PutUint64(b[9:], uint64(c.Position))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ErrUnknownCursor is a cursor that names no event the server holds: not
// one its feed answered, since every cursor it answers names the event it
// was answered after, and events are never deleted. A client that kept it
// from before a restore of a backup must start its feed again: the
// restored server gives the events written from then on the transaction
// ids the lost ones had, and read as a place, the cursor would leave out
// those that sort before it.
var ErrUnknownCursor = errors.New("not a cursor of this server's feed: it names no event the server holds " +
	"(kept from before a restore?); start the feed again from nothing")

// ErrMalformedCursor is a cursor that String did not make.
var ErrMalformedCursor = errors.New("not a cursor of this feed: pass next_cursor or an event's cursor as it was answered, or nothing for the start")

// ParseFeedCursor reads a cursor that String made; "" is the start.
// Anything else, even the same bytes written another way, is
// ErrMalformedCursor.
func ParseFeedCursor(s string) (FeedCursor, error) {
	if s == "" {
		return FeedCursor{}, nil
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != cursorBytes || b[0] != cursorVersion {
		return FeedCursor{}, ErrMalformedCursor
	}
	c := FeedCursor{Transaction: binary.BigEndian.Uint64(b[1:]), Position: int64(binary.BigEndian.Uint64(b[9:]))}
	// The decoder skips line breaks; the canonical form has none.
	if c.Transaction == 0 || c.Position <= 0 || c.String() != s {
		return FeedCursor{}, ErrMalformedCursor
	}
	return c, nil
}

// FeedEntry is one stored event of a merchant's feed as the store read it:
// decoded (Stored.Event set), or not (Err says why).
type FeedEntry struct {
	Cursor FeedCursor
	Stored publicevent.Stored
	Err    error
}

// FeedStore reads merchants' feeds.
type FeedStore interface {
	// Page returns up to n of the merchant's events after the cursor, in
	// feed order, only of transactions older than every transaction still
	// running. An event an operator skipped in its aggregate's projection
	// comes as event.Skipped, as the read models applied it.
	Page(ctx context.Context, merchantID string, after FeedCursor, n int) ([]FeedEntry, error)
	// Holds reports whether the store holds the event the cursor names
	// (its transaction and position): every cursor the feed answered
	// names one; one that names none was answered before a restore of a
	// backup lost its event, or made up.
	Holds(ctx context.Context, c FeedCursor) (bool, error)
}

// FeedWatch tells when a merchant's feed may have grown.
type FeedWatch interface {
	// Watch returns a channel that is closed when events of the merchant
	// may have become readable after the call (spuriously at times); stop
	// releases it.
	Watch(merchantID string) (changed <-chan struct{}, stop func())
}

// Limits of a feed read.
const (
	// FeedLimit is the default number of events of a page.
	FeedLimit = 100
	// FeedMaxLimit is the most a page may ask for.
	FeedMaxLimit = 1000
	// feedScan is how many stored events a read with types looks at per
	// query at least, and feedScans how many such queries one read makes
	// at most before it answers (perhaps empty, with a cursor past what it
	// looked at): a rare type behind a long backlog costs bounded work per
	// request, and no event is looked at twice.
	feedScan  = 1000
	feedScans = 10
)

// FeedRequest is one read of a merchant's feed.
type FeedRequest struct {
	// After is the cursor to continue from (zero: the start).
	After FeedCursor
	// Types are the public types to return (FeedTypes); none: all.
	Types []string
	// Limit is the most events to return, 1 to FeedMaxLimit.
	Limit int
	// Wait is how long to wait when there is nothing new (0: answer at
	// once).
	Wait time.Duration
	// Stop, when closed, ends a wait early (the server is shutting down).
	// Optional.
	Stop <-chan struct{}
}

// FeedEvent is a public event with its cursor: reading on from it returns
// what follows it.
type FeedEvent struct {
	publicevent.Event
	Cursor FeedCursor
}

// FeedPage is the answer of a read.
type FeedPage struct {
	Events []FeedEvent
	// Next is where to continue: the last event's cursor, or beyond stored
	// events that Types left out, or the request's After when nothing came.
	Next FeedCursor
}

// UnpublishableEventError is a stored event the feed cannot give in its
// public form (it does not decode, or its type has none). The feed stops
// before it: everything before it is answered, and a read from just before
// it is this error until it is fixed (a deploy) or an operator skips it
// (the projections park it too).
type UnpublishableEventError struct {
	EventID  string
	Position int64
	Err      error
}

func (e *UnpublishableEventError) Error() string {
	return fmt.Sprintf("event %s at position %d has no public form: %v", e.EventID, e.Position, e.Err)
}

func (e *UnpublishableEventError) Unwrap() error { return e.Err }

// FeedTypes returns the public types the feed carries: every one but the
// webhook ping, sorted.
func FeedTypes() []string {
	return slices.DeleteFunc(publicevent.Types(), func(t string) bool { return t == publicevent.WebhookEndpointPinged })
}

// Feed answers reads of merchants' event feeds.
type Feed struct {
	store FeedStore
	watch FeedWatch
}

// NewFeed checks its dependencies.
func NewFeed(store FeedStore, watch FeedWatch) (Feed, error) {
	if store == nil || watch == nil {
		return Feed{}, errors.New("query.NewFeed: nil dependency")
	}
	return Feed{store: store, watch: watch}, nil
}

// Read returns the merchant's next events after req.After. When there are
// none it waits, up to req.Wait, for the first to come, and answers an
// empty page with Next at req.After (or past events Types left out) when
// none does.
func (f Feed) Read(ctx context.Context, merchantID string, req FeedRequest) (FeedPage, error) {
	if f.store == nil {
		return FeedPage{}, errors.New("query.Feed: not configured")
	}
	var timeout <-chan time.Time
	if req.Wait > 0 {
		t := time.NewTimer(req.Wait)
		defer t.Stop()
		timeout = t.C
	}
	next, first := req.After, true
	for {
		// Watched before reading: a change after the read's snapshot
		// closes this channel, however soon it comes.
		changed, stop := f.watch.Watch(merchantID)
		page, err := f.read(ctx, merchantID, next, req, first)
		first = false
		if err != nil || len(page.Events) > 0 || req.Wait <= 0 || page.more {
			stop()
			return page.FeedPage, err
		}
		next = page.Next
		select {
		case <-changed:
		case <-timeout:
			stop()
			return FeedPage{Next: next}, nil
		case <-req.Stop:
			stop()
			return FeedPage{Next: next}, nil
		case <-ctx.Done():
			stop()
			return FeedPage{}, ctx.Err()
		}
		stop()
	}
}

// feedRead is one read: a page, and whether the store may hold more right
// after it.
type feedRead struct {
	FeedPage
	more bool
}

// read looks at the stored events after `after` until it has req.Limit
// events of req.Types, reaches the end, or has looked at feedScans pages.
// The first read of a request (first) checks that the store holds the
// cursor's event (Holds), whether or not anything follows it: after a
// restore the events written since may sort before a lost event's cursor
// while later ones follow it. The reads of its wait go on from cursors of
// this request.
func (f Feed) read(ctx context.Context, merchantID string, after FeedCursor, req FeedRequest, first bool) (feedRead, error) {
	if first && after != (FeedCursor{}) {
		if holds, err := f.store.Holds(ctx, after); err != nil {
			return feedRead{}, err
		} else if !holds {
			return feedRead{}, ErrUnknownCursor
		}
	}
	n := req.Limit
	if len(req.Types) > 0 {
		n = max(n, feedScan)
	}
	out := feedRead{FeedPage: FeedPage{Next: after}}
	for range feedScans {
		entries, err := f.store.Page(ctx, merchantID, out.Next, n)
		if err != nil {
			return feedRead{}, err
		}
		out.more = len(entries) == n
		for _, e := range entries {
			pub, err := publish(e)
			if err != nil {
				if len(out.Events) > 0 {
					out.more = true // answer what comes before it
					return out, nil
				}
				return feedRead{}, err
			}
			out.Next = e.Cursor
			// Filtered once decoded, not before (the store decodes, and
			// opens the sealed fields of, the events Types then drops):
			// an event's public type is not always its stored type's
			// (SubjectErased is customer.erased or staff_member.erased by
			// its data; a type this release does not know has none yet),
			// and an event that does not decode or open stops a filtered
			// read as any other (UnpublishableEventError), where dropped
			// unread the cursor would move past it.
			if len(req.Types) > 0 && !slices.Contains(req.Types, pub.Type) {
				continue
			}
			out.Events = append(out.Events, FeedEvent{Event: pub, Cursor: e.Cursor})
			if len(out.Events) == req.Limit {
				out.more = true
				return out, nil
			}
		}
		if len(out.Events) > 0 || !out.more {
			return out, nil
		}
	}
	return out, nil
}

// publish is an entry's public form, or an UnpublishableEventError; or,
// when what the event needs could not be read just now (its data key: a
// failover, a timeout), that error: the event is sound, and a retry reads
// it, where an UnpublishableEventError would tell the client and the
// operator to deploy a fix or skip it.
func publish(e FeedEntry) (publicevent.Event, error) {
	err := e.Err
	var temporary interface{ Temporary() bool }
	if errors.As(err, &temporary) && temporary.Temporary() {
		return publicevent.Event{}, fmt.Errorf("read event %s at position %d: %w", e.Stored.ID, e.Stored.Position, err)
	}
	var pub publicevent.Event
	if err == nil {
		pub, err = publicevent.From(e.Stored)
	}
	if err != nil {
		return publicevent.Event{}, &UnpublishableEventError{EventID: e.Stored.ID, Position: e.Stored.Position, Err: err}
	}
	return pub, nil
}
