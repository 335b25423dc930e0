package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/civil"
	"hearth/domain/plan"
)

// Service plans: the list with a form to create one, and a plan's page
// with its coming visits, each of which can be skipped or moved.

type plansData struct {
	Items                     []query.Plan
	Pager                     pager
	Customers, Catalog, Staff []option
	Frequencies               []option
	DefaultStart              string
	CustomerQ                 string
}

func (c *Console) plansPage(r *http.Request, s *session) (*page, error) {
	list, err := c.cfg.App.Queries.Plans.List(r.Context(), scope(s), query.PlanFilter{}, pageParam(r, 25))
	if err != nil {
		return nil, err
	}
	d := &plansData{Items: list.Items, Pager: newPager(r, listOf[query.Plan](list)),
		DefaultStart: c.cfg.Now().In(s.loc).AddDate(0, 0, 1).Format(time.DateOnly), CustomerQ: searchOf(r.URL.Query().Get("cq"))}
	if d.Customers, err = c.customerOptions(r, s, d.CustomerQ); err != nil {
		return nil, err
	}
	if d.Catalog, err = c.catalogOptions(r, s); err != nil {
		return nil, err
	}
	if d.Staff, err = c.staffOptions(r, s, false); err != nil {
		return nil, err
	}
	d.Staff = append([]option{{Value: "", Label: "(none)"}}, d.Staff...)
	for _, f := range []plan.Frequency{plan.Weekly, plan.Daily, plan.Monthly} {
		d.Frequencies = append(d.Frequencies, option{Value: string(f), Label: string(f)})
	}
	return &page{Title: "Service plans", Nav: "plans", Data: d, name: "plans"}, nil
}

// planFields are the create form's fields, as the form names them; the
// API names them with a dot (window.start).
var planFields = []string{"customer_id", "catalog_item_id", "staff_id", "price_cents", "window_start", "window_end",
	"recurrence_frequency", "recurrence_interval", "recurrence_start", "recurrence_count", "recurrence_until"}

// formFields renames the fields of a validation error as the console's
// forms name them (window.start is window_start).
func formFields(err error) error {
	var v *apperr.ValidationError
	if !errors.As(err, &v) {
		return err
	}
	out := &apperr.ValidationError{Fields: make([]apperr.FieldError, len(v.Fields))}
	for i, f := range v.Fields {
		out.Fields[i] = apperr.FieldError{Field: strings.ReplaceAll(f.Field, ".", "_"), Message: f.Message}
	}
	return out
}

// localDate reads a date field (YYYY-MM-DD); empty is the zero date.
func (f *formReader) localDate(name string) civil.Date {
	v := strings.TrimSpace(f.text(name))
	if v == "" {
		return civil.Date{}
	}
	d, err := civil.ParseDate(v)
	var none *civil.NoSuchDayError
	switch {
	case errors.As(err, &none):
		f.Add(name, "is no day of the calendar: %s, got %q", none.Why, v)
	case err != nil:
		f.Add(name, "must be a date, got %q", v)
	}
	return d
}

// clock reads a time of day field (HH:MM).
func (f *formReader) clock(name string) civil.Clock {
	v := strings.TrimSpace(f.text(name))
	if v == "" {
		f.Add(name, "is required")
		return 0
	}
	c, err := civil.ParseClock(v)
	if err != nil {
		f.Add(name, "must be a time of day such as 09:00, got %q", v)
	}
	return c
}

// number reads a whole number field; empty is 0.
func (f *formReader) number(name string) int {
	v := strings.TrimSpace(f.text(name))
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		f.Add(name, "must be a whole number, got %q", v)
	}
	return n
}

// createPlan creates a service plan (POST /v1/plans) and opens it.
func (c *Console) createPlan(w http.ResponseWriter, r *http.Request, s *session) error {
	f := newFormReader(r, s)
	cmd := command.CreatePlan{Meta: c.meta(w, s), CustomerID: f.text("customer_id"), CatalogItemID: f.text("catalog_item_id"),
		StaffID: f.text("staff_id"), Window: plan.Window{Start: f.clock("window_start"), End: f.clock("window_end")},
		Recurrence: plan.Recurrence{Frequency: plan.Frequency(f.text("recurrence_frequency")), Interval: f.number("recurrence_interval"),
			Start: f.localDate("recurrence_start"), Count: f.number("recurrence_count")}}
	if strings.TrimSpace(f.text("price_cents")) != "" {
		cmd.PriceCents = f.optCents("price_cents")
	}
	if until := f.localDate("recurrence_until"); !until.IsZero() {
		cmd.Recurrence.Until = &until
	}
	err := f.Err()
	var written command.Written
	if err == nil {
		written, err = c.cfg.App.Commands.Plans.Create(r.Context(), cmd)
	}
	if err != nil {
		return c.refuse(w, r, s, formFields(err), "new-plan", c.plansPage, planFields...)
	}
	id := ""
	if len(written.Stream) > 0 {
		id = written.Stream[0].StreamID
	}
	return c.done(w, r, s, written.Position, "/console/plans/"+url.PathEscape(id), "Plan created.")
}

type planData struct {
	Plan   query.Plan
	Visits []visitView
	Weeks  int
}

type visitView struct {
	Date, Day, Start, End string
	Moved                 bool
	Order                 string
}

// planWeeks is how far ahead a plan's page lists its visits.
const planWeeks = 8

func (c *Console) planPage(r *http.Request, s *session) (*page, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	v, err := c.cfg.App.Queries.Plans.Get(r.Context(), scope(s), id)
	if err != nil {
		return nil, err
	}
	now := c.cfg.Now()
	visits, err := c.cfg.App.Queries.PlanVisits.Visits(r.Context(), scope(s), id, now, now.AddDate(0, 0, 7*planWeeks))
	if err != nil {
		return nil, err
	}
	loc, err := civil.StoredZone(v.TimeZone) // as the plan reads it (plan.Rehydrate)
	if err != nil {
		loc = time.UTC
	}
	d := &planData{Plan: v, Weeks: planWeeks}
	for _, x := range visits {
		d.Visits = append(d.Visits, visitView{Date: x.Date.String(), Day: x.StartAt.In(loc).Format("Mon 2 Jan 2006"),
			Start: x.StartAt.In(loc).Format("15:04"), End: x.EndAt.In(loc).Format("15:04"), Moved: x.Moved,
			Order: x.OrderID})
	}
	title := "Plan"
	if v.CustomerName != "" {
		title = "Plan of " + v.CustomerName
	}
	return &page{Title: title, Nav: "plans", Data: d, name: "plan"}, nil
}

// planAction skips or moves a visit, or pauses, resumes or ends the plan.
func (c *Console) planAction(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	f := newFormReader(r, s)
	t := command.PlanTarget{Meta: c.meta(w, s), PlanID: id, ExpectedVersion: f.version()}
	h := c.cfg.App.Commands.Plans
	var written command.Written
	var message, formID string
	var fields []string
	switch action := r.PathValue("action"); action {
	case "skip":
		date := f.localDate("date")
		formID, message = "visit-"+date.String(), fmt.Sprintf("Visit of %s skipped.", date)
		if err = f.Err(); err == nil {
			written, err = h.Skip(r.Context(), command.SkipVisit{PlanTarget: t, Date: date})
		}
	case "move":
		date := f.localDate("date")
		cmd := command.MoveVisit{PlanTarget: t, Date: date, ToDate: f.localDate("to_date"), Start: f.clock("start")}
		formID, message, fields = "visit-"+date.String(), fmt.Sprintf("Visit of %s moved.", date), []string{"to_date", "start"}
		if err = f.Err(); err == nil {
			written, err = h.Move(r.Context(), cmd)
		}
	case "pause", "resume", "end":
		do := map[string]func(command.PlanHandlers, context.Context, command.PlanTarget) (command.Written, error){
			"pause": command.PlanHandlers.Pause, "resume": command.PlanHandlers.Resume, "end": command.PlanHandlers.End}[action]
		formID, message = "plan-status", fmt.Sprintf("Plan %s.", map[string]string{"pause": "paused", "resume": "resumed", "end": "ended"}[action])
		if err = f.Err(); err == nil {
			written, err = do(h, r.Context(), t)
		}
	default:
		return apperr.ErrNotFound
	}
	if err != nil {
		return c.refuse(w, r, s, err, formID, c.planPage, fields...)
	}
	return c.done(w, r, s, written.Position, "/console/plans/"+url.PathEscape(id), message)
}
