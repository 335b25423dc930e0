package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"hearth/app/access"
	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/civil"
	"hearth/domain/event"
	"hearth/domain/reference"
	"hearth/domain/uuid"
)

// meta describes the command a session's request causes, as the API's
// does: the key's subject is the actor, and the correlation id is the one
// the HTTP port gave the request (its answer's X-Correlation-ID).
func (c *Console) meta(w http.ResponseWriter, s *session) event.Meta {
	id := w.Header().Get("X-Correlation-ID")
	if id == "" {
		id = uuid.New()
	}
	return event.Meta{MerchantID: s.principal.MerchantID, Actor: s.principal.Subject(),
		CorrelationID: id, OccurredAt: event.Instant(c.cfg.Now())}
}

// scope is what a session may read: its merchant, and for a worker only
// its staff member's schedules and orders.
func scope(s *session) query.Scope {
	sc := query.Scope{MerchantID: s.principal.MerchantID}
	if s.principal.Role == access.Worker {
		sc.StaffID = s.principal.StaffID
	}
	return sc
}

// await waits, bounded by ConsistencyTimeout, until the read models have
// reached a write's position (read your writes), so that the next page
// shows the write. It reports false when they had not: the page then says
// so.
func (c *Console) await(ctx context.Context, s *session, position int64) bool {
	if c.cfg.Consistency == nil || position <= 0 {
		return true
	}
	select {
	case c.waits <- struct{}{}:
		defer func() { <-c.waits }()
	default:
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ConsistencyTimeout)
	defer cancel()
	reached, err := c.cfg.Consistency.Wait(ctx, s.principal.MerchantID, position)
	if err != nil {
		c.log.WarnContext(ctx, "read-your-writes wait failed", "position", position, "error", err)
		return false
	}
	return reached
}

// done ends a write to the event store: it waits for the write to reach
// the read models, then redirects with the flash.
func (c *Console) done(w http.ResponseWriter, r *http.Request, s *session, pos int64, to, message string) error {
	return seeOther(w, r, s, to, flash{Kind: "ok", Text: message, Behind: !c.await(r.Context(), s, pos)})
}

// all reads every page of a list (pages of 200, the API's largest), up to
// limit rows, following each page's cursor.
func all[T any](limit int, list func(p query.Page) (query.List[T], error)) ([]T, error) {
	var out []T
	p := query.Page{Number: 1, Size: 200}
	for {
		l, err := list(p)
		if err != nil {
			return nil, err
		}
		out = append(out, l.Items...)
		if l.Next == nil || len(out) >= limit {
			return out, nil
		}
		p = query.Page{Size: 200, After: l.Next}
	}
}

// allStaff reads the merchant's staff members, up to boardLimit.
func (c *Console) allStaff(ctx context.Context, s *session) ([]reference.StaffMember, error) {
	return all(boardLimit, func(p query.Page) (query.List[reference.StaffMember], error) {
		return c.cfg.App.Queries.Staff.List(ctx, s.principal.MerchantID, "", p)
	})
}

// boardLimit bounds what one board shows: the staff members and a week's
// schedules.
const boardLimit = 5000

type boardDay struct {
	Date  string // 2006-01-02
	Label string
	Today bool
}

type chip struct {
	ScheduleID, OrderID, Customer, Status string
	Start, End                            time.Time
}

type boardRow struct {
	Staff reference.StaffMember
	Cells [][]chip // one per day
}

// assignPick is what the assignment form shows: from a board cell, an
// order, or a refused form.
type assignPick struct {
	OrderID, StaffID string
	Start, End       string // datetime-local
	Version          string
}

type conflictView struct {
	Staff      string
	Start, End time.Time
	OrderID    string
	Customer   string
}

type boardData struct {
	Week, Prev, Next, ThisWeek string
	Days                       []boardDay
	Rows                       []boardRow
	Unassigned                 []query.Order
	Staff, Orders              []option
	Pick                       assignPick
	Conflict                   *conflictView
	Schedules                  int
	// Slots are the free slots for the order picked (nil when none is).
	Slots *slotsView
	// pickMissing: the order picked (?order) is not in the read model.
	pickMissing bool
	picked      *query.Order
}

// weekOf is the start of the Monday that starts the week of the date in
// loc (today when date is empty, unreadable, or its week starts at no
// storable instant: the first week of 0001 in a zone ahead of UTC starts in
// year 0, which Postgres refuses): its midnight, or where the clocks skip
// midnight, the moment they start that day (civil.Resolve; time.Date may
// give the evening before).
func weekOf(date string, now time.Time, loc *time.Location) time.Time {
	monday := func(d civil.Date) time.Time {
		return civil.Resolve(d.AddDays(-((int(d.Weekday()) + 6) % 7)), 0, loc)
	}
	if d, err := civil.ParseDate(date); err == nil {
		if start := monday(d); event.InstantProblem(start) == "" {
			return start
		}
	}
	return monday(civil.DateOf(now, loc))
}

// weekDays are the board's columns of the week that starts on monday,
// counted on the calendar: a day whose midnight the clocks skip is still
// its own column.
func weekDays(monday, today civil.Date, loc *time.Location) []boardDay {
	days := make([]boardDay, 7)
	for i := range days {
		day := monday.AddDays(i)
		days[i] = boardDay{Date: day.String(), Label: civil.Resolve(day, 0, loc).Format("Mon 2 Jan"), Today: day == today}
	}
	return days
}

// defaultWindow is the window the assignment form offers on a day picked
// (a date): 09:00 to 11:00 on its clock, also on a day the clocks change.
func defaultWindow(day string, loc *time.Location) (start, end string, ok bool) {
	d, err := civil.ParseDate(day)
	if err != nil {
		return "", "", false
	}
	return civil.Resolve(d, civil.At(9, 0), loc).Format(localLayout), civil.Resolve(d, civil.At(11, 0), loc).Format(localLayout), true
}

// weekEnd is the start of the Monday after the week that starts at start.
func weekEnd(start time.Time, loc *time.Location) time.Time {
	return civil.Resolve(civil.DateOf(start, loc).AddDays(7), 0, loc)
}

// board is the page of ?week (a date in it), with what ?order, ?staff and
// ?day pick for the assignment form.
func (c *Console) board(r *http.Request, s *session) (*page, error) {
	q := r.URL.Query()
	return c.boardPage(r, s, q.Get("week"), assignPick{OrderID: q.Get("order"), StaffID: q.Get("staff")}, q.Get("day"))
}

// boardPage reads the week's board: the staff down the side, the week's
// schedules across, the orders waiting for staff, and what the assignment
// form shows.
func (c *Console) boardPage(r *http.Request, s *session, week string, pick assignPick, day string) (*page, error) {
	ctx, sc, loc := r.Context(), scope(s), s.loc
	now := c.cfg.Now()
	start := weekOf(week, now, loc)
	end := weekEnd(start, loc)
	monday := civil.DateOf(start, loc)
	d := &boardData{Week: monday.String(), Prev: monday.AddDays(-7).String(),
		Next: monday.AddDays(7).String(), ThisWeek: weekOf("", now, loc).Format(time.DateOnly)}
	d.Days = weekDays(monday, civil.DateOf(now, loc), loc)
	staff, err := c.allStaff(ctx, s)
	if err != nil {
		return nil, err
	}
	schedules, err := all(boardLimit, func(p query.Page) (query.List[query.Schedule], error) {
		return c.cfg.App.Queries.Schedules.List(ctx, sc, query.ScheduleFilter{From: &start, To: &end,
			Statuses: []string{"planned", "in_service", "done"}}, p)
	})
	if err != nil {
		return nil, err
	}
	// The week's orders name the customers of its schedules.
	orders, err := all(boardLimit, func(p query.Page) (query.List[query.Order], error) {
		return c.cfg.App.Queries.Orders.List(ctx, sc, query.OrderFilter{From: &start, To: &end}, p)
	})
	if err != nil {
		return nil, err
	}
	customers := make(map[string]string, len(orders))
	for _, o := range orders {
		customers[o.ID] = o.CustomerName
	}
	waiting, err := c.cfg.App.Queries.Orders.List(ctx, sc, query.OrderFilter{Statuses: []string{"pending", "confirmed"}}, query.Page{Number: 1, Size: 100})
	if err != nil {
		return nil, err
	}
	d.Unassigned = waiting.Items
	d.Schedules = len(schedules)

	rowOf := map[string]int{}
	for _, st := range staff {
		booked := slices.ContainsFunc(schedules, func(x query.Schedule) bool { return x.StaffID == st.ID })
		if !st.Active && !booked {
			continue
		}
		rowOf[st.ID] = len(d.Rows)
		d.Rows = append(d.Rows, boardRow{Staff: st, Cells: make([][]chip, 7)})
		if st.Active {
			d.Staff = append(d.Staff, option{Value: st.ID, Label: st.Name})
		}
	}
	slices.SortFunc(schedules, func(a, b query.Schedule) int { return a.StartAt.Compare(b.StartAt) })
	for _, x := range schedules {
		i, ok := rowOf[x.StaffID]
		if !ok {
			continue
		}
		// The column is the job's date on the session's clock: a count of
		// 24 hours from Monday's midnight is a day off after the clocks
		// change on a weekday (23:30 the day after they go back, 00:30 the
		// day after they go forward).
		day := civil.DateOf(x.StartAt, loc).DaysSince(monday)
		day = min(max(day, 0), 6)
		d.Rows[i].Cells[day] = append(d.Rows[i].Cells[day], chip{ScheduleID: x.ID, OrderID: x.OrderID,
			Customer: customers[x.OrderID], Status: x.Status, Start: x.StartAt, End: x.EndAt})
	}
	for _, o := range d.Unassigned {
		d.Orders = append(d.Orders, option{Value: o.ID, Label: orderLabel(o, loc)})
	}
	d.Pick = pick
	if err := c.fillPick(r, s, d, day); err != nil {
		return nil, err
	}
	if d.picked != nil {
		// The slots are read on demand: by htmx once the page is shown,
		// or here when a browser without it asked (?slots), never for a
		// live part's poll.
		q := r.URL.Query()
		load := safe(r) && q.Get("slots") != "" && q.Get("part") == ""
		if err := c.freeSlots(r, s, d, *d.picked, d.Staff, load); err != nil {
			return nil, err
		}
	}
	p := &page{Title: "Dispatch board", Nav: "board", Data: d, name: "board"}
	if d.pickMissing {
		// Said, not dropped silently: an order just created through the
		// API reaches the read models a moment later.
		p.Flash = flash{Kind: "warn", Text: "The order to assign was not found: if it was just created, it has not reached the console yet (reload in a moment)."}
	}
	return p, nil
}

func orderLabel(o query.Order, loc *time.Location) string {
	l := o.CustomerName + " · " + money(o.AmountCents)
	if o.ScheduledStartAt != nil {
		l += " · " + o.ScheduledStartAt.In(loc).Format("Mon 2 Jan 15:04")
	}
	return l + " (" + label(o.Status) + ")"
}

// fillPick completes the assignment form: an order picked from elsewhere
// (its page) joins the choices with its window; a cell picked on the board
// starts at 09:00 that day, for two hours.
func (c *Console) fillPick(r *http.Request, s *session, d *boardData, day string) error {
	pk := &d.Pick
	if pk.OrderID != "" {
		o, ok, err := c.pickedOrder(r, s, pk.OrderID)
		switch {
		case err != nil:
			return err
		case !ok:
			pk.OrderID, d.pickMissing = "", true
		default:
			d.picked = &o
			if !slices.ContainsFunc(d.Orders, func(op option) bool { return op.Value == o.ID }) {
				d.Orders = append([]option{{Value: o.ID, Label: orderLabel(o, s.loc)}}, d.Orders...)
			}
			if pk.Version == "" {
				pk.Version = fmt.Sprint(o.Version)
			}
			if pk.Start == "" && o.ScheduledStartAt != nil && o.ScheduledEndAt != nil {
				pk.Start, pk.End = o.ScheduledStartAt.In(s.loc).Format(localLayout), o.ScheduledEndAt.In(s.loc).Format(localLayout)
			}
			if pk.StaffID == "" && o.StaffID != nil {
				pk.StaffID = *o.StaffID
			}
		}
	}
	if start, end, ok := defaultWindow(day, s.loc); ok && pk.Start == "" {
		pk.Start, pk.End = start, end
	}
	return nil
}

// pickedOrder reads the order picked to assign; ok is false when there is
// no such order in the read model.
func (c *Console) pickedOrder(r *http.Request, s *session, id string) (o query.Order, ok bool, err error) {
	if !uuid.Valid(id) {
		return o, false, nil
	}
	o, err = c.cfg.App.Queries.Orders.Get(r.Context(), scope(s), id)
	if errors.Is(err, apperr.ErrNotFound) {
		return o, false, nil
	}
	return o, err == nil, err
}

// assign assigns an order to a staff member for a window (PUT
// /v1/orders/{id}/assignment). A double booking is refused by the write
// side and shown with the job it clashes with.
func (c *Console) assign(w http.ResponseWriter, r *http.Request, s *session) error {
	f := newFormReader(r, s)
	orderID := f.text("order_id")
	if !uuid.Valid(orderID) {
		f.Add("order_id", "choose an order to assign")
	}
	cmd := command.AssignOrder{OrderTarget: command.OrderTarget{Meta: c.meta(w, s), OrderID: orderID, ExpectedVersion: f.version()},
		StaffID: f.text("staff_id"), DispatchNote: f.text("dispatch_note")}
	if t := f.when("start_at"); t != nil {
		cmd.StartAt = *t
	}
	if t := f.when("end_at"); t != nil {
		cmd.EndAt = *t
	}
	var written command.Written
	err := f.Err()
	if err == nil {
		written, err = c.cfg.App.Commands.Orders.Assign(r.Context(), cmd)
	}
	week := f.text("week")
	if err != nil {
		if !known(err) {
			return err
		}
		// Refused for a change made meanwhile, the form comes back with the
		// order's version now (the write side's: the read model may not show
		// it yet), as the hours form does: sending it again assigns
		// knowingly, instead of meeting the same conflict.
		version := f.text("expected_version")
		if stale := new(apperr.VersionError); errors.As(err, &stale) {
			version = strconv.Itoa(stale.Actual)
		}
		// A free slot's times come as instants (page.Instant); the form's
		// inputs show them as its datetime-local fields take them.
		for name, at := range map[string]time.Time{"start_at": cmd.StartAt, "end_at": cmd.EndAt} {
			if _, err := time.Parse(time.RFC3339, f.text(name)); err == nil && !at.IsZero() {
				r.PostForm.Set(name, at.In(s.loc).Format(localLayout))
			}
		}
		p, perr := c.boardPage(r, s, week, assignPick{OrderID: orderID, StaffID: cmd.StaffID,
			Start: f.text("start_at"), End: f.text("end_at"), Version: version}, "")
		if perr != nil {
			return perr
		}
		p.Form = newForm("assign", r.PostForm, err, "order_id", "staff_id", "start_at", "end_at", "dispatch_note")
		if id := p.Form.Problem.ConflictingScheduleID; id != "" {
			p.Data.(*boardData).Conflict = c.conflict(r, s, id)
		}
		c.render(w, r, s, refusal(p.Form), "board", p)
		return nil
	}
	to := "/console/board?week=" + url.QueryEscape(weekOf(cmd.StartAt.In(s.loc).Format(time.DateOnly), c.cfg.Now(), s.loc).Format(time.DateOnly))
	// The flash, kept in the session's row, names nobody (the board shows
	// who): an erasure does not reach the sessions.
	return c.done(w, r, s, written.Position, to, fmt.Sprintf("Assigned for %s–%s.",
		cmd.StartAt.In(s.loc).Format("Mon 2 Jan 15:04"), cmd.EndAt.In(s.loc).Format("15:04")))
}

// conflict describes the schedule a refused assignment clashed with.
func (c *Console) conflict(r *http.Request, s *session, scheduleID string) *conflictView {
	x, err := c.cfg.App.Queries.Schedules.Get(r.Context(), scope(s), scheduleID)
	if err != nil {
		return nil
	}
	v := &conflictView{Staff: x.StaffName, Start: x.StartAt, End: x.EndAt, OrderID: x.OrderID}
	if o, err := c.cfg.App.Queries.Orders.Get(r.Context(), scope(s), x.OrderID); err == nil {
		v.Customer = o.CustomerName
	}
	return v
}
