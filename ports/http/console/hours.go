package console

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/availability"
	"hearth/domain/civil"
)

// Working hours on a staff member's page: the weekly pattern and the
// dated exceptions, read and replaced through the use cases of GET and
// PUT /v1/staff/{id}/working-hours (the whole record at once, checked
// before anything is stored: a refused form changes nothing).

// weekdays are the days as the pattern's form lists them, Monday first.
var weekdays = []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday, time.Saturday, time.Sunday}

type dayHours struct {
	Name, Label, Shifts string
}

type exceptionView struct {
	Date, Day, Reason, Shifts string
}

type hoursView struct {
	StaffID    string
	Version    int
	TimeZone   string
	Week       []dayHours
	Exceptions []exceptionView
	Reasons    []option
	Today      string
}

// staffHours reads a staff member's working hours for their page.
func (c *Console) staffHours(r *http.Request, s *session, staffID string) (any, error) {
	q := c.cfg.App.Queries.Calendar
	h, err := q.StaffHours(r.Context(), s.principal.MerchantID, staffID)
	if err != nil {
		return nil, err
	}
	tz, err := q.TimeZone(r.Context(), s.principal.MerchantID)
	if err != nil {
		return nil, err
	}
	loc, err := civil.StoredZone(tz)
	if err != nil {
		loc = time.UTC
	}
	v := &hoursView{StaffID: staffID, Version: h.Version, TimeZone: tz, Today: civil.DateOf(c.cfg.Now(), loc).String()}
	for _, wd := range weekdays {
		v.Week = append(v.Week, dayHours{Name: strings.ToLower(wd.String()), Label: wd.String(), Shifts: shiftsText(h.Week[wd])})
	}
	for _, e := range h.Exceptions {
		v.Exceptions = append(v.Exceptions, exceptionView{Date: e.Date.String(), Day: e.Date.Weekday().String(),
			Reason: string(e.Reason), Shifts: shiftsText(e.Shifts)})
	}
	for _, r := range []availability.Reason{availability.Holiday, availability.SickDay, availability.ExtraDay, availability.ChangedHours} {
		v.Reasons = append(v.Reasons, option{Value: string(r), Label: label(string(r))})
	}
	return v, nil
}

// shiftsText writes shifts as the forms read them: 09:00-12:00, 13:00-17:00.
func shiftsText(shifts []availability.Shift) string {
	parts := make([]string, len(shifts))
	for i, sh := range shifts {
		parts[i] = sh.Start.String() + "-" + sh.End.String()
	}
	return strings.Join(parts, ", ")
}

// shiftRE is one shift as typed: 09:00-17:00 (a dash, an en dash or "to"
// between, spaces allowed).
var shiftRE = regexp.MustCompile(`^(\d\d:\d\d)\s*(?:-|–|to)\s*(\d\d:\d\d)$`)

// shifts reads a field of shifts separated by commas; empty is none.
func (f *formReader) shifts(name string) []availability.Shift {
	v := strings.TrimSpace(f.text(name))
	if v == "" {
		return nil
	}
	var out []availability.Shift
	for _, part := range strings.Split(v, ",") {
		m := shiftRE.FindStringSubmatch(strings.TrimSpace(part))
		var start, end civil.Clock
		var err1, err2 error
		if m != nil {
			start, err1 = civil.ParseClock(m[1])
			end, err2 = civil.ParseClock(m[2])
		}
		if m == nil || err1 != nil || err2 != nil {
			f.Add(name, "must be shifts such as 09:00-12:00, 13:00-17:00, got %q", strings.TrimSpace(part))
			return nil
		}
		out = append(out, availability.Shift{Start: start, End: end})
	}
	return out
}

// hoursField is the form field a working hours error names:
// week.monday[0].end is the pattern's monday; exceptions[n].shifts[0].end
// is the new exception's shifts when n is the new one's index.
var hoursField = regexp.MustCompile(`^(?:week\.(\w+)|exceptions\[(\d+)\]\.(\w+))`)

// hoursFields renames a working hours validation error's fields as the
// forms name them; added is the index of the exception the form adds (-1
// for none).
func hoursFields(err error, added int) error {
	var v *apperr.ValidationError
	if !errors.As(err, &v) {
		return err
	}
	out := &apperr.ValidationError{Fields: make([]apperr.FieldError, len(v.Fields))}
	for i, fe := range v.Fields {
		out.Fields[i] = fe
		m := hoursField.FindStringSubmatch(fe.Field)
		switch {
		case m == nil:
		case m[1] != "":
			out.Fields[i].Field = m[1]
		case m[2] == strconv.Itoa(added):
			out.Fields[i].Field = m[3]
		}
	}
	return out
}

// hoursFormFields are the fields of the working hours forms.
var hoursFormFields = []string{"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "date", "reason", "shifts"}

// hoursAction changes a staff member's working hours: "week" replaces the
// weekly pattern, "add" adds a dated exception, "remove" removes one. The
// rest of the record is kept as it is stored; build is the staff member's
// page, shown again with a refused form.
func (c *Console) hoursAction(build func(r *http.Request, s *session) (*page, error)) handler {
	return func(w http.ResponseWriter, r *http.Request, s *session) error {
		id, err := pathID(r)
		if err != nil {
			return err
		}
		h, err := c.cfg.App.Queries.Calendar.StaffHours(r.Context(), s.principal.MerchantID, id)
		if err != nil {
			return err
		}
		f := newFormReader(r, s)
		added := -1
		var formID, message string
		// An exception is added to, or removed from, the hours as stored
		// now; the weekly form replaces the pattern the page showed, so it
		// states the version it was shown at, and a change saved since (in
		// another tab, through the API) is not overwritten unseen.
		expected := &h.Version
		switch r.PathValue("action") {
		case "week":
			formID, message = "hours-week", "Weekly hours saved."
			expected = f.version()
			for _, wd := range weekdays {
				h.Week[wd] = f.shifts(strings.ToLower(wd.String()))
			}
		case "add":
			e := availability.Exception{Date: f.localDate("date"), Reason: availability.Reason(f.text("reason")), Shifts: f.shifts("shifts")}
			formID, message = "hours-exception", fmt.Sprintf("Exception of %s (%s) added.", e.Date, label(string(e.Reason)))
			added = len(h.Exceptions)
			h.Exceptions = append(h.Exceptions, e)
		case "remove":
			date := f.localDate("date")
			formID, message = "exception-"+date.String(), fmt.Sprintf("Exception of %s removed.", date)
			kept := h.Exceptions[:0]
			for _, e := range h.Exceptions {
				if e.Date != date {
					kept = append(kept, e)
				}
			}
			if len(kept) == len(h.Exceptions) && f.Err() == nil {
				// Removed meanwhile (another tab, the API): its row, where a
				// problem would show, is gone; say so above the page.
				return seeOther(w, r, s, "/console/staff/"+id+"#exceptions",
					flash{Kind: "warn", Text: fmt.Sprintf("%s has no exception to remove (removed meanwhile?).", date)})
			}
			h.Exceptions = kept
		default:
			return apperr.ErrNotFound
		}
		err = f.Err()
		if err == nil {
			_, err = c.cfg.App.Commands.Calendar.PutStaffHours(r.Context(), s.principal.MerchantID, h, expected, c.cfg.Now())
		}
		if err != nil {
			return c.refuse(w, r, s, hoursFields(err, added), formID, build, hoursFormFields...)
		}
		// Working hours are reference data, not events: the next page
		// reads them as stored.
		return seeOther(w, r, s, "/console/staff/"+id+"#hours", flash{Kind: "ok", Text: message})
	}
}
