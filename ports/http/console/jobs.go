package console

import (
	"errors"
	"net/http"
	"slices"
	"time"

	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/civil"
	"hearth/domain/reference"
	"hearth/domain/schedule"
)

// job is one of a worker's schedules with what the worker needs at the
// door: the customer's name, address and phone, and the order's notes.
type job struct {
	Schedule query.Schedule
	Customer string
	Address  string
	Phone    string
	Notes    string
	Dispatch string
	Next     []string // what the worker may move it to
}

type jobsData struct {
	// Earlier are the jobs of earlier days still planned or in service:
	// the worker's to start or finish yet (a night's work, a Done
	// forgotten), which no other page of a worker key reaches.
	Earlier, Today, Upcoming []job
	Date                     string
}

// jobsAhead is how far ahead the worker's list looks, and how many jobs it
// shows at most.
const (
	jobsAhead = 14 * 24 * time.Hour
	jobsMax   = 100
)

// jobsPage lists the worker's schedules of earlier days not finished yet,
// of today (done ones too) and of the next two weeks, through the worker's
// scope: a worker key sees only
// its own staff member's schedules and their orders. The customer's
// address and phone come from the customer of that order, which the
// worker is sent to.
func (c *Console) jobsPage(r *http.Request, s *session) (*page, error) {
	ctx, sc, loc := r.Context(), scope(s), s.loc
	now := c.cfg.Now().In(loc)
	today, tomorrow := dayOf(now, loc)
	until := today.Add(jobsAhead)
	l, err := c.cfg.App.Queries.Schedules.List(ctx, sc, query.ScheduleFilter{StaffID: s.principal.StaffID, From: &today, To: &until,
		Statuses: []string{string(schedule.StatusPlanned), string(schedule.StatusInService), string(schedule.StatusDone)}},
		query.Page{Number: 1, Size: jobsMax})
	if err != nil {
		return nil, err
	}
	earlier, err := c.cfg.App.Queries.Schedules.List(ctx, sc, query.ScheduleFilter{StaffID: s.principal.StaffID, To: &today,
		Statuses: []string{string(schedule.StatusPlanned), string(schedule.StatusInService)}},
		query.Page{Number: 1, Size: jobsMax})
	if err != nil {
		return nil, err
	}
	items := append(earlier.Items, l.Items...)
	slices.SortFunc(items, func(a, b query.Schedule) int { return a.StartAt.Compare(b.StartAt) })
	d := &jobsData{Date: today.Format("Monday 2 January")}
	for _, x := range items {
		if x.Status == string(schedule.StatusDone) && !x.StartAt.Before(tomorrow) {
			continue
		}
		j := job{Schedule: x}
		for _, st := range []schedule.Status{schedule.StatusInService, schedule.StatusDone} {
			if schedule.Status(x.Status).CanMoveTo(st) {
				j.Next = append(j.Next, string(st))
			}
		}
		o, err := c.cfg.App.Queries.Orders.Get(ctx, sc, x.OrderID)
		switch {
		case errors.Is(err, apperr.ErrNotFound): // not projected yet
		case err != nil:
			return nil, err
		default:
			j.Notes, j.Dispatch = o.Notes, o.DispatchNote
			cu, err := c.cfg.App.Queries.Customers.Get(ctx, s.principal.MerchantID, o.CustomerID)
			switch {
			case errors.Is(err, apperr.ErrNotFound):
			case err != nil:
				return nil, err
			default:
				j.Customer, j.Address, j.Phone = customerName(cu), cu.Address, cu.Phone
			}
		}
		switch {
		case x.StartAt.Before(today):
			d.Earlier = append(d.Earlier, j)
		case x.StartAt.Before(tomorrow):
			d.Today = append(d.Today, j)
		default:
			d.Upcoming = append(d.Upcoming, j)
		}
	}
	return &page{Title: "My jobs", Nav: "jobs", Data: d, name: "jobs"}, nil
}

// jobStatus starts or finishes one of the worker's jobs (POST
// /v1/schedules/{id}/status with a worker key: its own schedules, to
// in_service or done only).
func (c *Console) jobStatus(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	f := newFormReader(r, s)
	st := f.text("status")
	cmd := command.ChangeScheduleStatus{Meta: c.meta(w, s), ScheduleID: id, ExpectedVersion: f.version(), Status: st,
		WorkerStaffID: s.principal.StaffID}
	var written command.Written
	if err = f.Err(); err == nil {
		written, err = c.cfg.App.Commands.Schedules.ChangeStatus(r.Context(), cmd)
	}
	if err != nil {
		return c.refuse(w, r, s, err, "job-"+id, c.jobsPage, "status")
	}
	msg := "Job started."
	if st == string(schedule.StatusDone) {
		msg = "Job done."
	}
	return c.done(w, r, s, written.Position, "/console/jobs", msg)
}

// dayOf is the start of the day of now in loc and of the next one, each
// where its clock starts (civil.Resolve): where the clocks skip midnight,
// time.Date may give the evening before.
func dayOf(now time.Time, loc *time.Location) (today, tomorrow time.Time) {
	day := civil.DateOf(now, loc)
	return civil.Resolve(day, 0, loc), civil.Resolve(day.AddDays(1), 0, loc)
}

// customerName is what a page calls the customer of record cu: an erased
// customer keeps the record's id with every personal field empty, and
// reads as erased (domain: an erased person leaves a gap that reads well,
// never a blank).
func customerName(cu reference.Customer) string {
	if cu.Erased() {
		return "erased customer"
	}
	return cu.Name
}
