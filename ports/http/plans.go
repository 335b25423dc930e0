package httpport

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/availability"
	"hearth/domain/civil"
	"hearth/domain/event"
	"hearth/domain/plan"
)

// Service plans, working hours, the merchant's time zone and the bookable
// slots. Local dates and times of day travel as text ("2026-03-29",
// "09:00") and are read here, so that a bad one is a 422 naming its field
// like any other rule of the plan.

type windowInput struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

// recurrenceInput is a recurrence as a request gives it and as a plan's
// body shows it.
type recurrenceInput struct {
	Frequency string  `json:"frequency"`
	Interval  int     `json:"interval"`
	Weekdays  []int   `json:"weekdays"`
	MonthDay  int     `json:"month_day"`
	Start     string  `json:"start"`
	Until     *string `json:"until"`
	Count     int     `json:"count"`
}

type createPlanInput struct {
	CustomerID    string          `json:"customer_id"`
	CatalogItemID string          `json:"catalog_item_id"`
	PriceCents    *int64          `json:"price_cents"`
	StaffID       string          `json:"staff_id"`
	Window        windowInput     `json:"window"`
	Recurrence    recurrenceInput `json:"recurrence"`
}

type changePlanInput struct {
	From            string           `json:"from"`
	PriceCents      *int64           `json:"price_cents"`
	StaffID         *string          `json:"staff_id"`
	Window          *windowInput     `json:"window"`
	Recurrence      *recurrenceInput `json:"recurrence"`
	ExpectedVersion *int             `json:"expected_version"`
}

type visitInput struct {
	Date            string `json:"date"`
	ToDate          string `json:"to_date"`
	Start           string `json:"start"`
	ExpectedVersion *int   `json:"expected_version"`
}

type versionInput struct {
	ExpectedVersion *int `json:"expected_version"`
}

// local reads local dates and times of day, collecting an error per field.
type local struct{ errs apperr.Fields }

func (l *local) date(field, s string) civil.Date {
	if s == "" {
		return civil.Date{}
	}
	d, err := civil.ParseDate(s)
	var none *civil.NoSuchDayError
	switch {
	case errors.As(err, &none):
		l.errs.Add(field, "is no day of the calendar: %s, got %q", none.Why, s)
	case err != nil:
		l.errs.Add(field, "must be a date written YYYY-MM-DD, got %q", s)
	}
	return d
}

func (l *local) clock(field, s string) civil.Clock {
	if s == "" {
		l.errs.Add(field, "is required")
		return 0
	}
	c, err := civil.ParseClock(s)
	if err != nil {
		l.errs.Add(field, "must be a time of day written HH:MM, from 00:00 to 24:00 (a window lies within one day), got %q", s)
	}
	return c
}

func (l *local) window(in windowInput) plan.Window {
	return plan.Window{Start: l.clock("window.start", in.Start), End: l.clock("window.end", in.End)}
}

func (l *local) recurrence(in recurrenceInput) plan.Recurrence {
	r := plan.Recurrence{Frequency: plan.Frequency(in.Frequency), Interval: in.Interval, MonthDay: in.MonthDay,
		Start: l.date("recurrence.start", in.Start), Count: in.Count}
	for _, w := range in.Weekdays {
		r.Weekdays = append(r.Weekdays, time.Weekday(w))
	}
	if in.Until != nil {
		u := l.date("recurrence.until", *in.Until)
		r.Until = &u
	}
	return r
}

func (s *server) planAnswer(r *http.Request, status int) answerer[command.Written] {
	return writtenAnswerer[query.Plan](plan.StreamType, status, "/v1/plans",
		func(ctx context.Context, v query.Plan, names map[string]string) (query.Plan, error) {
			return s.App.Queries.Plans.Named(ctx, scope(r), v, names)
		}, planBodyOf)
}

func (s *server) createPlan(w http.ResponseWriter, r *http.Request) error {
	var in createPlanInput
	if err := decode(r, &in); err != nil {
		return err
	}
	var l local
	cmd := command.CreatePlan{Meta: s.meta(r), CustomerID: in.CustomerID, CatalogItemID: in.CatalogItemID,
		PriceCents: in.PriceCents, StaffID: in.StaffID, Window: l.window(in.Window), Recurrence: l.recurrence(in.Recurrence)}
	if err := l.errs.Err(); err != nil {
		return err
	}
	how := s.planAnswer(r, http.StatusCreated)
	out, err := s.App.Commands.Plans.Create(how.seal(r), cmd)
	if err != nil {
		return err
	}
	return how.reply(w, r, out)
}

func (s *server) planTarget(r *http.Request, fromBody *int) (command.PlanTarget, error) {
	id, err := pathID(r)
	if err != nil {
		return command.PlanTarget{}, err
	}
	expected, err := expectedVersion(r, fromBody)
	if err != nil {
		return command.PlanTarget{}, err
	}
	return command.PlanTarget{Meta: s.meta(r), PlanID: id, ExpectedVersion: expected}, nil
}

// planCall is a plan command ready to run: on the handlers, with the
// context that seals the answer.
type planCall func(ctx context.Context, h command.PlanHandlers) (command.Written, error)

// onPlan runs a command on the plan of the path and answers the plan as
// written: build makes the command from its target, reading local dates
// and times of day into l, whose errors are a 422 before anything runs.
func (s *server) onPlan(w http.ResponseWriter, r *http.Request, expected *int, build func(t command.PlanTarget, l *local) planCall) error {
	t, err := s.planTarget(r, expected)
	if err != nil {
		return err
	}
	var l local
	call := build(t, &l)
	if err := l.errs.Err(); err != nil {
		return err
	}
	how := s.planAnswer(r, http.StatusOK)
	out, err := call(how.seal(r), s.App.Commands.Plans)
	if err != nil {
		return err
	}
	return how.reply(w, r, out)
}

func (s *server) changePlan(w http.ResponseWriter, r *http.Request) error {
	var in changePlanInput
	if err := decode(r, &in); err != nil {
		return err
	}
	return s.onPlan(w, r, in.ExpectedVersion, func(t command.PlanTarget, l *local) planCall {
		cmd := command.ChangePlan{PlanTarget: t, From: l.date("from", in.From), PriceCents: in.PriceCents, StaffID: in.StaffID}
		if in.Window != nil {
			win := l.window(*in.Window)
			cmd.Window = &win
		}
		if in.Recurrence != nil {
			rec := l.recurrence(*in.Recurrence)
			cmd.Recurrence = &rec
		}
		return func(ctx context.Context, h command.PlanHandlers) (command.Written, error) { return h.Change(ctx, cmd) }
	})
}

func (s *server) skipVisit(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Date            string `json:"date"`
		ExpectedVersion *int   `json:"expected_version"`
	}
	if err := decode(r, &in); err != nil {
		return err
	}
	return s.onPlan(w, r, in.ExpectedVersion, func(t command.PlanTarget, l *local) planCall {
		cmd := command.SkipVisit{PlanTarget: t, Date: l.date("date", in.Date)}
		return func(ctx context.Context, h command.PlanHandlers) (command.Written, error) { return h.Skip(ctx, cmd) }
	})
}

func (s *server) moveVisit(w http.ResponseWriter, r *http.Request) error {
	var in visitInput
	if err := decode(r, &in); err != nil {
		return err
	}
	return s.onPlan(w, r, in.ExpectedVersion, func(t command.PlanTarget, l *local) planCall {
		cmd := command.MoveVisit{PlanTarget: t, Date: l.date("date", in.Date), ToDate: l.date("to_date", in.ToDate),
			Start: l.clock("start", in.Start)}
		return func(ctx context.Context, h command.PlanHandlers) (command.Written, error) { return h.Move(ctx, cmd) }
	})
}

// planLifecycle handles pause, resume and end: a body of at most an
// expected_version.
func (s *server) planLifecycle(do func(command.PlanHandlers, context.Context, command.PlanTarget) (command.Written, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		var in versionInput
		if err := decodeOptional(r, &in); err != nil {
			return err
		}
		return s.onPlan(w, r, in.ExpectedVersion, func(t command.PlanTarget, _ *local) planCall {
			return func(ctx context.Context, h command.PlanHandlers) (command.Written, error) { return do(h, ctx, t) }
		})
	}
}

var (
	planLifecyclePause  = command.PlanHandlers.Pause
	planLifecycleResume = command.PlanHandlers.Resume
	planLifecycleEnd    = command.PlanHandlers.End
)

func (s *server) getPlan(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	v, err := s.App.Queries.Plans.Get(r.Context(), scope(r), id)
	if err != nil {
		return err
	}
	if notModified(w, r, v.Version) {
		return nil
	}
	writeJSON(w, http.StatusOK, planBodyOf(v))
	return nil
}

func (s *server) listPlans(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	f := query.PlanFilter{
		Statuses:   p.oneOf("status", []string{string(plan.StatusActive), string(plan.StatusPaused), string(plan.StatusEnded)}),
		CustomerID: p.uuid("customer_id"),
	}
	page := p.listPage()
	if p.err != nil {
		return p.err
	}
	list, err := s.App.Queries.Plans.List(r.Context(), scope(r), f, page)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, listBodyOf(nextOf(p, list), planBodyOf))
	return nil
}

// planBody is a service plan as the API shows it.
type planBody struct {
	ID              string           `json:"id"`
	CustomerID      string           `json:"customer_id"`
	CustomerName    string           `json:"customer_name,omitempty"`
	CatalogItemID   string           `json:"catalog_item_id"`
	CatalogItemName string           `json:"catalog_item_name,omitempty"`
	StaffID         *string          `json:"staff_id"`
	StaffName       string           `json:"staff_name,omitempty"`
	TimeZone        string           `json:"time_zone"`
	Status          string           `json:"status"`
	PriceCents      int64            `json:"price_cents"`
	Window          windowInput      `json:"window"`
	Recurrence      recurrenceInput  `json:"recurrence"`
	ChangedFrom     *string          `json:"changed_from"`
	Skipped         []string         `json:"skipped"`
	Moved           []movedVisitBody `json:"moved"`
	PausedAt        *time.Time       `json:"paused_at"`
	EndedAt         *time.Time       `json:"ended_at"`
	CreatedAt       time.Time        `json:"created_at"`
	UpdatedAt       time.Time        `json:"updated_at"`
	Version         int              `json:"version"`
}

type movedVisitBody struct {
	Date   string `json:"date"`
	ToDate string `json:"to_date"`
	Start  string `json:"start"`
}

func planBodyOf(v query.Plan) planBody {
	rec := v.Terms.Recurrence
	b := planBody{ID: v.ID, CustomerID: v.CustomerID, CustomerName: v.CustomerName, CatalogItemID: v.CatalogItemID,
		CatalogItemName: v.CatalogItemName, StaffID: v.StaffID, StaffName: v.StaffName, TimeZone: v.TimeZone,
		Status: v.Status, PriceCents: v.Terms.PriceCents,
		Window: windowInput{Start: v.Terms.Window.Start.String(), End: v.Terms.Window.End.String()},
		Recurrence: recurrenceInput{Frequency: string(rec.Frequency), Interval: rec.Interval, Weekdays: []int{},
			MonthDay: rec.MonthDay, Start: rec.Start.String(), Count: rec.Count},
		Skipped: []string{}, Moved: []movedVisitBody{}, PausedAt: v.PausedAt, EndedAt: v.EndedAt,
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Version: v.Version}
	for _, w := range rec.Weekdays {
		b.Recurrence.Weekdays = append(b.Recurrence.Weekdays, int(w))
	}
	if rec.Until != nil {
		u := rec.Until.String()
		b.Recurrence.Until = &u
	}
	if v.ChangedFrom != nil {
		c := v.ChangedFrom.String()
		b.ChangedFrom = &c
	}
	for _, d := range v.Skipped {
		b.Skipped = append(b.Skipped, d.String())
	}
	for _, m := range v.Moved {
		b.Moved = append(b.Moved, movedVisitBody{Date: m.Date.String(), ToDate: m.ToDate.String(), Start: m.ToStart.String()})
	}
	return b
}

// The merchant's settings.

type settingsBody struct {
	TimeZone string `json:"time_zone"`
}

func (s *server) getSettings(w http.ResponseWriter, r *http.Request) error {
	tz, err := s.App.Queries.Calendar.TimeZone(r.Context(), principal(r).MerchantID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, settingsBody{TimeZone: tz})
	return nil
}

func (s *server) putSettings(w http.ResponseWriter, r *http.Request) error {
	var in settingsBody
	if err := decode(r, &in); err != nil {
		return err
	}
	how := settingsAnswer
	if err := s.App.Commands.Calendar.SetTimeZone(how.seal(r), principal(r).MerchantID, principal(r).Subject(), in.TimeZone); err != nil {
		return err
	}
	return how.reply(w, r, &in.TimeZone)
}

// settingsAnswer answers a change of the settings with them; the store
// hands it the zone it set.
var settingsAnswer = recordAnswerer[string](http.StatusOK, nil, func(tz string) settingsBody { return settingsBody{TimeZone: tz} })

// Working hours.

var weekdayNames = [7]string{"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}

type shiftBody struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

type exceptionBody struct {
	Date   string      `json:"date"`
	Reason string      `json:"reason"`
	Shifts []shiftBody `json:"shifts"`
}

type workingHoursBody struct {
	StaffID        string                 `json:"staff_id"`
	Week           map[string][]shiftBody `json:"week"`
	Exceptions     []exceptionBody        `json:"exceptions"`
	CatalogItemIDs []string               `json:"catalog_item_ids"`
	UpdatedAt      time.Time              `json:"updated_at"`
	Version        int                    `json:"version"`
}

type workingHoursInput struct {
	Week            map[string][]shiftBody `json:"week"`
	Exceptions      []exceptionBody        `json:"exceptions"`
	CatalogItemIDs  []string               `json:"catalog_item_ids"`
	ExpectedVersion *int                   `json:"expected_version"`
}

func shiftsBody(shifts []availability.Shift) []shiftBody {
	out := make([]shiftBody, len(shifts))
	for i, sh := range shifts {
		out[i] = shiftBody{Start: sh.Start.String(), End: sh.End.String()}
	}
	return out
}

func workingHoursBodyOf(h availability.StaffHours) workingHoursBody {
	b := workingHoursBody{StaffID: h.StaffID, Week: map[string][]shiftBody{}, Exceptions: []exceptionBody{},
		CatalogItemIDs: h.CatalogItemIDs, UpdatedAt: h.UpdatedAt, Version: h.Version}
	for wd, shifts := range h.Week {
		b.Week[weekdayNames[wd]] = shiftsBody(shifts)
	}
	for _, e := range h.Exceptions {
		b.Exceptions = append(b.Exceptions, exceptionBody{Date: e.Date.String(), Reason: string(e.Reason), Shifts: shiftsBody(e.Shifts)})
	}
	if b.CatalogItemIDs == nil {
		b.CatalogItemIDs = []string{}
	}
	return b
}

func (l *local) shifts(field string, in []shiftBody) []availability.Shift {
	out := make([]availability.Shift, len(in))
	for i, sh := range in {
		f := field + "[" + strconv.Itoa(i) + "]."
		out[i] = availability.Shift{Start: l.clock(f+"start", sh.Start), End: l.clock(f+"end", sh.End)}
	}
	return out
}

func (s *server) getWorkingHours(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	h, err := s.App.Queries.Calendar.StaffHours(r.Context(), principal(r).MerchantID, id)
	if err != nil {
		return err
	}
	if notModified(w, r, h.Version) {
		return nil
	}
	writeJSON(w, http.StatusOK, workingHoursBodyOf(h))
	return nil
}

// workingHoursAnswer answers a PUT of working hours: 200, the hours, and
// their version as the ETag.
var workingHoursAnswer = answerer[*availability.StaffHours]{
	pick: pickRecord[availability.StaffHours],
	render: func(_ context.Context, h *availability.StaffHours) (command.Answer, error) {
		return jsonAnswer(http.StatusOK, workingHoursBodyOf(*h), map[string]string{"ETag": etag(h.Version)})
	},
}

func (s *server) putWorkingHours(w http.ResponseWriter, r *http.Request) error {
	var in workingHoursInput
	if err := decode(r, &in); err != nil {
		return err
	}
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var l local
	h := availability.StaffHours{StaffID: id, CatalogItemIDs: in.CatalogItemIDs}
	for name, shifts := range in.Week {
		wd := -1
		for i, n := range weekdayNames {
			if n == strings.ToLower(name) {
				wd = i
			}
		}
		if wd < 0 {
			l.errs.Add("week."+name, "is not a day of the week (monday to sunday)")
			continue
		}
		h.Week[wd] = l.shifts("week."+weekdayNames[wd], shifts)
	}
	for i, e := range in.Exceptions {
		f := "exceptions[" + strconv.Itoa(i) + "]."
		ex := availability.Exception{Date: l.date(f+"date", e.Date), Reason: availability.Reason(e.Reason),
			Shifts: l.shifts(f+"shifts", e.Shifts)}
		h.Exceptions = append(h.Exceptions, ex)
	}
	if err := l.errs.Err(); err != nil {
		return err
	}
	expected, err := expectedVersion(r, in.ExpectedVersion)
	if err != nil {
		return err
	}
	out, err := s.App.Commands.Calendar.PutStaffHours(workingHoursAnswer.seal(r), principal(r).MerchantID, h, expected, s.Now())
	if err != nil {
		return err
	}
	return workingHoursAnswer.reply(w, r, &out)
}

// Availability.

// slotBody is one slot as the API shows it. Its times are RFC 3339
// strings, as a time.Time encodes itself: a page holds up to hundreds of
// them, and encoding/json checks every Marshaler's output again.
type slotBody struct {
	StaffID string `json:"staff_id"`
	StartAt string `json:"start_at"`
	EndAt   string `json:"end_at"`
}

type slotsBody struct {
	Items      []slotBody `json:"items"`
	TimeZone   string     `json:"time_zone"`
	NextCursor string     `json:"next_cursor,omitempty"`
}

// minutesParam reads a length of time written as a Go duration ("90m",
// "2h") or a number of minutes ("90").
func (p *params) minutes(name string) time.Duration {
	s := p.one(name)
	if s == "" && !p.v.Has(name) { // given empty: refused, as int's are
		return 0
	}
	if n, err := strconv.Atoi(s); err == nil {
		if limit := int(math.MaxInt64 / time.Minute); n > limit || n < -limit { // would wrap around to another length
			p.fail(name, "must be a number of minutes of at most %d, got %q", limit, s)
			return 0
		}
		return time.Duration(n) * time.Minute
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		p.fail(name, "must be a number of minutes or a duration such as 90m or 2h, got %q", s)
	}
	return d
}

func (s *server) availability(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	q := availability.Query{
		Duration:      p.minutes("duration"),
		Buffer:        p.minutes("buffer"),
		Step:          p.minutes("step"),
		StaffID:       p.uuid("staff_id"),
		CatalogItemID: p.uuid("catalog_item_id"),
		Cursor:        p.boundCursor(),
		Limit:         p.int("page_size", 20, 1, availability.MaxLimit),
	}
	if from := p.time("from"); from != nil {
		q.From = *from
	}
	if to := p.time("to"); to != nil {
		q.To = *to
	}
	if !p.v.Has("step") { // not given: the default; given as 0 or empty, refused
		q.Step = query.DefaultSlotStep
	}
	if p.err != nil {
		return p.err
	}
	page, tz, err := s.App.Queries.Calendar.Slots(r.Context(), principal(r).MerchantID, q)
	if err != nil {
		return err
	}
	b := slotsBody{Items: make([]slotBody, len(page.Slots)), TimeZone: tz, NextCursor: p.withList(page.Next)}
	for i, sl := range page.Slots {
		b.Items[i] = slotBody{StaffID: sl.StaffID, StartAt: sl.Start.UTC().Format(time.RFC3339Nano), EndAt: sl.End.UTC().Format(time.RFC3339Nano)}
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

// visitBody is one visit of a plan as the API shows it.
type visitBody struct {
	Date       string    `json:"date"`
	StartAt    time.Time `json:"start_at"`
	EndAt      time.Time `json:"end_at"`
	PriceCents int64     `json:"price_cents"`
	StaffID    *string   `json:"staff_id"`
	Moved      bool      `json:"moved"`
	OrderID    string    `json:"order_id"`
}

func visitBodyOf(v query.Visit) visitBody {
	b := visitBody{Date: v.Date.String(), StartAt: v.StartAt.UTC(), EndAt: v.EndAt.UTC(), PriceCents: v.PriceCents,
		Moved: v.Moved, OrderID: v.OrderID}
	if v.StaffID != "" {
		id := v.StaffID
		b.StaffID = &id
	}
	return b
}

// DefaultVisitRange is how far a visits read looks without a to.
const DefaultVisitRange = 8 * 7 * 24 * time.Hour

func (s *server) listPlanVisits(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	p := newParams(r)
	from, to := s.Now(), time.Time{}
	if t := p.time("from"); t != nil {
		from = *t
	}
	if t := p.time("to"); t != nil {
		to = *t
	} else if to = from.Add(DefaultVisitRange); to.After(event.MaxInstant) {
		to = event.MaxInstant
	}
	if p.err != nil {
		return p.err
	}
	visits, err := s.App.Queries.PlanVisits.Visits(r.Context(), scope(r), id, from, to)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": mapAll(visits, visitBodyOf)})
	return nil
}
