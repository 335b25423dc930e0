package availability

import (
	"cmp"
	"container/heap"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/civil"
)

// Limits of a query. MaxRange bounds a range's length, or its length on
// the local clock (the query's zone), whichever is shorter: a month of 31
// days is one query also when the clocks go back in it (October in London
// lasts 31 days and an hour), and so are 31 times 24 hours over a day the
// clocks skip an hour of.
const (
	MaxRange    = 31 * 24 * time.Hour
	MaxDuration = 24 * time.Hour
	MaxBuffer   = 24 * time.Hour
	MaxLimit    = 500
)

// Staff is what Slots needs to know of one staff member.
type Staff struct {
	ID string
	// CatalogItems are the catalog items the staff member does; a query for
	// an item keeps only those who list it.
	CatalogItems []string
	Hours        WorkingHours
	// TimeOff is time away within working hours (an appointment, half a
	// day): no slot overlaps it.
	TimeOff []Interval
	// Busy is the staff member's jobs (their live schedules): no slot
	// overlaps one, nor the buffer either side of it.
	Busy []Interval
}

// Query asks for bookable slots.
type Query struct {
	// From and To bound the slots: each lies within [From, To).
	From, To time.Time
	// Duration is each slot's length: more than 0, at most 24 hours, whole
	// minutes.
	Duration time.Duration
	// Buffer is kept free before and after every job (0 to 24 hours, whole
	// minutes); it does not apply to time off or the ends of shifts.
	Buffer time.Duration
	// Step is the slots' grid: a slot starts where the local clock shows a
	// whole multiple of Step since midnight (Step 15m: 09:00, 09:15, ...).
	// Whole minutes, dividing 24 hours.
	Step time.Duration
	// TimeZone is the merchant's IANA time zone, the clock of the grid and
	// of the working hours.
	TimeZone string
	// StaffID, when set, keeps only that staff member; CatalogItemID, when
	// set, only the staff members who do that item.
	StaffID       string
	CatalogItemID string
	// Cursor continues from a page's Next; empty for the first page.
	Cursor string
	// Limit is the page size, 1 to MaxLimit.
	Limit int
}

// Slot is one bookable slot: StaffID is free over [Start, End).
type Slot struct {
	StaffID    string
	Start, End time.Time
}

// Page is a page of slots, ordered by start, then staff id. Next is the
// cursor of the next page, empty on the last.
type Page struct {
	Slots []Slot
	Next  string
}

// clockChange bounds how much longer than its length on the local clock a
// range may last: the clocks going back in it (an hour, in most zones; a
// zone that moved across the date line, a day).
const clockChange = 24 * time.Hour

// check checks the query; with anyZone, before its zone is known (the
// zone is not checked, and the range may be as long as it could be on the
// clock of some zone).
func (q Query) check(anyZone bool) (*time.Location, error) {
	var errs apperr.Fields
	var loc *time.Location
	if !anyZone {
		var err error
		loc, err = civil.LoadZone("time_zone", q.TimeZone)
		if v := (*apperr.ValidationError)(nil); errors.As(err, &v) {
			errs = append(errs, v.Fields...)
		}
	}
	if q.From.IsZero() {
		errs.Add("from", "is required")
	}
	if q.To.IsZero() {
		errs.Add("to", "is required")
	} else if !q.From.IsZero() && !q.To.After(q.From) {
		errs.Add("to", "must be after from")
	} else if !q.From.IsZero() && (anyZone && q.To.Sub(q.From) > MaxRange+clockChange || !anyZone && min(q.To.Sub(q.From), onClock(q.From, q.To, loc)) > MaxRange) {
		errs.Add("to", "must be at most %s after from (or 31 days on the clock of the merchant's time zone)", MaxRange)
	}
	minutes := func(field string, d, lo, hi time.Duration) {
		if d < lo || d > hi || d%time.Minute != 0 {
			errs.Add(field, "must be whole minutes from %s to %s", lo, hi)
		}
	}
	minutes("duration", q.Duration, time.Minute, MaxDuration)
	minutes("buffer", q.Buffer, 0, MaxBuffer)
	if q.Step < time.Minute || q.Step%time.Minute != 0 || (24*time.Hour)%q.Step != 0 {
		errs.Add("step", "must be whole minutes that divide 24 hours, such as 5m, 15m or 1h")
	}
	if q.Limit < 1 || q.Limit > MaxLimit {
		errs.Add("limit", "must be between 1 and %d", MaxLimit)
	}
	if _, err := parseCursor(q.Cursor); err != nil {
		errs.Add("cursor", "is not a cursor of these slots")
	}
	return loc, errs.Err()
}

// onClock is civil.OnClock, or the range's length when loc is nil (an
// unknown zone, refused anyway).
func onClock(from, to time.Time, loc *time.Location) time.Duration {
	if loc == nil {
		return to.Sub(from)
	}
	return civil.OnClock(from, to, loc)
}

// Slots answers the bookable slots of a query, in order, one page at a
// time. A slot of staff member S is [s, s+Duration) such that:
//
//   - it lies within [From, To);
//   - the local clock shows a multiple of Step since midnight at s;
//   - it lies within S's working time (Intervals: shifts joined where they
//     touch, so a slot may run from one shift into the next);
//   - it overlaps none of S's time off, and none of S's jobs widened by
//     Buffer on either side.
//
// Slots are ordered by start, then staff id (unique per staff member);
// a page holds Limit of them, and Next names its last, so the next page
// starts right after it whatever was booked in between.
//
// The work is a page's, not the range's: each staff member's slots come
// lazily, a day of working time (a chunk) at a time, and a merge takes the
// earliest of them until the page (and one more, to know there is a next)
// is full. A staff member with no free time is read only as far as the
// page reaches. A page reads at most chunkBudget chunks beyond one per
// staff member: past that it ends early, holding fewer than Limit slots
// (none, even) with a Next, so that a calendar with little free time in a
// long range costs a client more pages, never one request the range's
// work for every staff member.
func Slots(q Query, staff []Staff) (Page, error) {
	loc, err := q.check(false)
	if err != nil {
		return Page{}, err
	}
	after, _ := parseCursor(q.Cursor)
	g := grid{loc: loc, step: int64(q.Step / time.Second)}
	var queue streams
	for _, s := range staff {
		if q.StaffID != "" && s.ID != q.StaffID || q.CatalogItemID != "" && !slices.Contains(s.CatalogItems, q.CatalogItemID) {
			continue
		}
		// Only slots after the cursor.
		from := q.From
		if after != nil {
			lb := after.start
			if s.ID <= after.staffID {
				lb = lb.Add(time.Nanosecond)
			}
			if lb.After(from) {
				from = lb
			}
		}
		queue = append(queue, newStream(s, q, from, g))
	}
	heap.Init(&queue)
	budget := chunkBudget + len(queue)
	page := make([]Slot, 0, min(q.Limit+1, 64))
	for len(page) <= q.Limit && len(queue) > 0 {
		st := queue[0]
		if st.ready {
			page = append(page, st.slot)
			st.ready = st.take()
			heap.Fix(&queue, 0)
			continue
		}
		if budget <= 0 {
			if next, ok := resume(page, st.hi, q.From, after); ok {
				return Page{Slots: page, Next: next.String()}, nil
			}
		}
		budget--
		if !st.read() {
			heap.Pop(&queue)
			continue
		}
		st.ready = st.take()
		heap.Fix(&queue, 0)
	}
	if len(page) <= q.Limit {
		return Page{Slots: page}, nil
	}
	page = page[:q.Limit:q.Limit]
	return Page{Slots: page, Next: cursor{page[q.Limit-1].Start, page[q.Limit-1].StaffID}.String()}, nil
}

// chunkBudget is how many chunks (a staff member's day) a page reads
// beyond one per staff member before it ends early.
var chunkBudget = 2000

// resume is the cursor of a page that ended early: every slot not yet
// taken starts at or after lo (the earliest chunk not read), and those
// taken at or before it. Slots start on whole seconds of the grid, so the
// second before lo, with a staff id after every id ("~" sorts after
// UUIDs), puts the next page at lo for everyone; unless the page's last
// slot starts at lo itself, whose place the next page must start after.
// ok is false when that would not move past where this page started (a
// page must make progress; it then reads on).
func resume(page []Slot, lo, from time.Time, after *cursor) (cursor, bool) {
	c := cursor{lo.Add(-time.Nanosecond), "~"}
	if n := len(page); n > 0 && !page[n-1].Start.Before(lo) {
		c = cursor{page[n-1].Start, page[n-1].StaffID}
	}
	if len(page) > 0 {
		return c, true
	}
	start := from
	if after != nil && after.start.After(start) {
		start = after.start
	}
	return c, c.start.Truncate(time.Second).After(start)
}

// streamChunk is how far ahead of its last slot a stream reads working
// time: a day, so that a page of the day's first slots resolves a few
// days' shifts per staff member, not the whole range's.
const streamChunk = 24 * time.Hour

// stream yields one staff member's slots that start at or after its
// from, in order: take gives the next one within the chunk read, read
// reads the next chunk.
type stream struct {
	id       string
	hours    WorkingHours
	duration time.Duration
	to       time.Time
	g        grid
	// blocked is the time off and the buffered jobs, sorted and disjoint;
	// those that end before the chunk are dropped as the stream goes.
	blocked []Interval
	// hi ends the chunk: spans are the free working time where its slots
	// start before hi, the first one's Start moved past the slots taken.
	hi    time.Time
	spans []Interval
	// ready: slot is the stream's next slot; otherwise every slot it has
	// left starts at or after hi.
	ready bool
	slot  Slot
}

func newStream(s Staff, q Query, from time.Time, g grid) *stream {
	blocked := make([]Interval, 0, len(s.TimeOff)+len(s.Busy))
	for _, b := range s.TimeOff {
		if b.Start.Before(b.End) {
			blocked = append(blocked, b)
		}
	}
	for _, b := range s.Busy {
		if b.Start.Before(b.End) {
			blocked = append(blocked, Interval{b.Start.Add(-q.Buffer), b.End.Add(q.Buffer)})
		}
	}
	return &stream{id: s.ID, hours: s.Hours, duration: q.Duration, to: q.To, g: g, blocked: merge(blocked), hi: from}
}

// key is where the stream stands in the merge: its next slot, or, before
// its next chunk is read, the earliest that chunk's slots can be.
func (st *stream) key() Slot {
	if st.ready {
		return st.slot
	}
	return Slot{StaffID: st.id, Start: st.hi}
}

// take moves to the staff member's next slot in the chunk read; false
// when the chunk has none left.
func (st *stream) take() bool {
	for len(st.spans) > 0 {
		w := &st.spans[0]
		// A later grid point of this span is later still, and so are
		// the next spans: a start at or after hi is the next chunk's.
		if at := st.g.ceil(w.Start); at.Before(st.hi) && !at.Add(st.duration).After(w.End) {
			st.slot = Slot{StaffID: st.id, Start: at, End: at.Add(st.duration)}
			w.Start = at.Add(time.Second)
			return true
		}
		st.spans = st.spans[1:]
	}
	return false
}

// read reads the next chunk: slots that start in [lo, hi), which lie
// within working time clipped to [lo, hi+duration) (and To). False when
// the stream has reached To.
func (st *stream) read() bool {
	readHook()
	lo := st.hi
	end := lo.Add(st.duration)
	if end.After(st.to) {
		return false
	}
	st.hi = lo.Add(streamChunk)
	if end = st.hi.Add(st.duration); end.After(st.to) {
		end = st.to
	}
	for len(st.blocked) > 0 && !st.blocked[0].End.After(lo) {
		st.blocked = st.blocked[1:]
	}
	st.spans = subtract(st.hours.Intervals(lo, end, st.g.loc), st.blocked)
	return true
}

// readHook counts chunks read, in tests.
var readHook = func() {}

// streams is a heap of streams by their key: the merge of their slots in
// page order.
type streams []*stream

func (h streams) Len() int           { return len(h) }
func (h streams) Less(i, j int) bool { return before(h[i].key(), h[j].key()) }
func (h streams) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *streams) Push(x any)        { *h = append(*h, x.(*stream)) }
func (h *streams) Pop() any {
	old := *h
	st := old[len(old)-1]
	*h = old[:len(old)-1]
	return st
}

// before orders slots by start, then staff id.
func before(a, b Slot) bool {
	return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.StaffID, b.StaffID)) < 0
}

// subtract returns the parts of the sorted, disjoint spans in from that no
// span of the sorted, disjoint cut covers.
func subtract(from, cut []Interval) []Interval {
	var out []Interval
	j := 0
	for _, f := range from {
		start := f.Start
		for j < len(cut) && !cut[j].End.After(start) {
			j++
		}
		for k := j; k < len(cut) && cut[k].Start.Before(f.End); k++ {
			if cut[k].Start.After(start) {
				out = append(out, Interval{start, cut[k].Start})
			}
			start = cut[k].End // after start: cut is sorted and disjoint, and j skipped those that end by start
		}
		if start.Before(f.End) {
			out = append(out, Interval{start, f.End})
		}
	}
	return out
}

// grid is the instants where the clock of loc shows a multiple of step
// seconds since midnight. Within one period of the zone (one offset) they
// are the instants whose Unix time plus the offset is a multiple of step,
// since step divides a day; a change of the clocks starts a new period.
type grid struct {
	loc  *time.Location
	step int64
}

// ceil returns the first instant of the grid at or after t.
func (g grid) ceil(t time.Time) time.Time {
	for {
		local := t.In(g.loc)
		_, off := local.Zone()
		_, end := local.ZoneBounds()
		u := t.Unix()
		if t.Nanosecond() > 0 {
			u++
		}
		wall := u + int64(off)
		at := time.Unix(wall+((-wall%g.step)+g.step)%g.step-int64(off), 0)
		if end.IsZero() || at.Before(end) {
			return at
		}
		t = end
	}
}

type cursor struct {
	start   time.Time
	staffID string
}

func (c cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.start.Unix(), 10) + " " + c.staffID))
}

// parseCursor reads a page's Next; nil for an empty one.
func parseCursor(s string) (*cursor, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("decode cursor: %w", err)
	}
	unix, staffID, ok := strings.Cut(string(b), " ")
	sec, err := strconv.ParseInt(unix, 10, 64)
	if !ok || err != nil || staffID == "" {
		return nil, fmt.Errorf("decode cursor: %q is not <unix seconds> <staff id>", b)
	}
	return &cursor{time.Unix(sec, 0), staffID}, nil
}
