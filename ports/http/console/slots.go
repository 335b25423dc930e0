package console

import (
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"hearth/app/query"
	"hearth/domain/availability"
	"hearth/domain/uuid"
)

// Free slots on the board: once an order is picked to assign, the assign
// card lists the bookable slots of the board's week (the availability
// query of GET /v1/availability) for the order's length, for anyone or
// for one staff member; picking a slot assigns the order in it. They are
// read on demand: htmx asks for them (GET /console/board/slots) when the
// card appears, and without JavaScript a link asks the board for them
// (?slots=1). The board's first render reads none.

// Slot choices.
const (
	slotStep     = 30 * time.Minute
	slotPage     = 10
	slotFallback = 2 * time.Hour // an order without a wanted window (as fillPick)
)

var slotLengths = []time.Duration{30 * time.Minute, time.Hour, 90 * time.Minute, 2 * time.Hour, 3 * time.Hour, 4 * time.Hour, 8 * time.Hour}

// slotBuffers are the gaps the block offers to keep free around other jobs.
var slotBuffers = []time.Duration{0, 15 * time.Minute, 30 * time.Minute, time.Hour}

type slotView struct {
	StaffID, Staff string
	Start, End     time.Time
}

// slotsView is the free slots block of the assign card.
type slotsView struct {
	Week, OrderID, StaffID, Version string
	Duration, Buffer                string // minutes
	Staff, Durations, Buffers       []option
	// Loaded: the slots were read (else the block asks for them).
	Loaded   bool
	Items    []slotView
	Next     string // the next page's cursor
	Length   string // the duration in words
	StaffFor string // the staff member's name when one is chosen
	Problem  string // why no slot could be read
}

// Query is the block's address parameters, with the cursor of a page
// (encoded here: the template must not escape it again).
func (v *slotsView) Query(cursor string) template.URL {
	q := url.Values{"week": {v.Week}, "order": {v.OrderID}, "duration": {v.Duration}, "buffer": {v.Buffer}}
	if v.StaffID != "" {
		q.Set("staff", v.StaffID)
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	return template.URL(q.Encode())
}

// minutesText writes a length of time as the slot choices show it.
func minutesText(d time.Duration) string {
	h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
	switch {
	case d == 0:
		return "none"
	case h == 0:
		return fmt.Sprintf("%d min", m)
	case m == 0:
		return fmt.Sprintf("%d h", h)
	}
	return fmt.Sprintf("%d h %02d", h, m)
}

func minuteOptions(ds []time.Duration) []option {
	out := make([]option, len(ds))
	for i, d := range ds {
		out[i] = option{Value: strconv.Itoa(int(d / time.Minute)), Label: minutesText(d)}
	}
	return out
}

// freeSlots builds the free slots block of the board d for the order
// picked (d.Pick); load reads the slots. q holds the block's choices
// (duration, buffer, cursor); staff are the choices of staff members.
func (c *Console) freeSlots(r *http.Request, s *session, d *boardData, o query.Order, staff []option, load bool) error {
	q := r.URL.Query()
	length := slotFallback
	if o.ScheduledStartAt != nil && o.ScheduledEndAt != nil {
		if w := o.ScheduledEndAt.Sub(*o.ScheduledStartAt); w > 0 && w <= availability.MaxDuration && w%time.Minute == 0 {
			length = w
		}
	}
	if n, err := strconv.Atoi(q.Get("duration")); err == nil && n > 0 {
		length = time.Duration(n) * time.Minute
	}
	var buffer time.Duration
	if n, err := strconv.Atoi(q.Get("buffer")); err == nil && n >= 0 {
		buffer = time.Duration(n) * time.Minute
	}
	lengths := slotLengths
	if !slices.Contains(lengths, length) {
		lengths = append(slices.Clone(lengths), length)
		slices.Sort(lengths)
	}
	staffID := d.Pick.StaffID
	if !uuid.Valid(staffID) {
		// ?staff from the address: anyone, rather than a query Postgres
		// refuses (the staff filter is a uuid).
		staffID = ""
	}
	v := &slotsView{Week: d.Week, OrderID: o.ID, StaffID: staffID, Version: strconv.Itoa(o.Version),
		Duration: strconv.Itoa(int(length / time.Minute)), Buffer: strconv.Itoa(int(buffer / time.Minute)),
		Staff: append([]option{{Value: "", Label: "Anyone"}}, staff...), Durations: minuteOptions(lengths),
		Buffers: minuteOptions(slotBuffers), Length: minutesText(length), Loaded: load}
	for _, op := range staff {
		if op.Value == v.StaffID {
			v.StaffFor = op.Label
		}
	}
	d.Slots = v
	if !load {
		return nil
	}
	start := weekOf(d.Week, c.cfg.Now(), s.loc)
	from, to := start, weekEnd(start, s.loc)
	if now := c.cfg.Now(); now.After(from) {
		from = now
	}
	if !from.Before(to) {
		v.Problem = "This week is over: go to a week to come."
		return nil
	}
	page, _, err := c.cfg.App.Queries.Calendar.Slots(r.Context(), s.principal.MerchantID, availability.Query{
		From: from, To: to, Duration: length, Buffer: buffer, Step: slotStep, StaffID: v.StaffID,
		Cursor: q.Get("cursor"), Limit: slotPage})
	if err != nil {
		if !known(err) {
			return err
		}
		v.Problem = newForm("slots", nil, err).Problem.Detail
		return nil
	}
	names := map[string]string{}
	for _, op := range staff {
		names[op.Value] = op.Label
	}
	for _, sl := range page.Slots {
		v.Items = append(v.Items, slotView{StaffID: sl.StaffID, Staff: names[sl.StaffID], Start: sl.Start, End: sl.End})
	}
	v.Next = page.Next
	return nil
}

// boardSlots answers the free slots block alone, for htmx; a browser
// that opens it as a page gets the board with the block instead.
func (c *Console) boardSlots(w http.ResponseWriter, r *http.Request, s *session) error {
	q := r.URL.Query()
	if r.Header.Get("HX-Request") == "" {
		q.Set("slots", "1")
		http.Redirect(w, r, "/console/board?"+q.Encode()+"#free-slots", http.StatusSeeOther)
		return nil
	}
	d := &boardData{Week: weekOf(q.Get("week"), c.cfg.Now(), s.loc).Format(time.DateOnly),
		Pick: assignPick{OrderID: q.Get("order"), StaffID: q.Get("staff")}}
	o, ok, err := c.pickedOrder(r, s, d.Pick.OrderID)
	if err != nil {
		return err
	}
	if ok {
		// Every active staff member, as the board lists them: a slot may
		// be anyone's.
		staff, err := c.allStaff(r.Context(), s)
		if err != nil {
			return err
		}
		var active []option
		for _, st := range staff {
			if st.Active {
				active = append(active, option{Value: st.ID, Label: st.Name})
			}
		}
		if err := c.freeSlots(r, s, d, o, active, true); err != nil {
			return err
		}
	}
	c.render(w, r, s, http.StatusOK, "board-slots", &page{Data: d, name: "board-slots"})
	return nil
}
