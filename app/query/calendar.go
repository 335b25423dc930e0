package query

import (
	"context"
	"errors"
	"time"

	"hearth/domain/availability"
)

// CalendarReadModel reads the merchant's calendar: its time zone, its
// staff members' working hours and their jobs. It reads the write side
// (the event store's database), where the bookings are exact: a slot is
// never offered over a job the read models have not caught up with.
type CalendarReadModel interface {
	TimeZone(ctx context.Context, merchantID string) (string, error)
	// StaffHours returns one staff member's working hours (none set: the
	// zero record with StaffID); apperr.ErrNotFound when the merchant has
	// no such staff member.
	StaffHours(ctx context.Context, merchantID, staffID string) (availability.StaffHours, error)
	// Calendars returns the merchant's time zone and its active staff
	// members (only staffID when set) with their working hours and their
	// live jobs that overlap [from, to), in one read: an availability query
	// waits for one round trip. apperr.ErrNotFound when the merchant has
	// none.
	Calendars(ctx context.Context, merchantID, staffID string, from, to time.Time) (tz string, staff []availability.Staff, err error)
}

// Calendar answers the calendar reads: settings, working hours and the
// bookable slots.
type Calendar struct {
	rm CalendarReadModel
}

// NewCalendar checks its dependency.
func NewCalendar(rm CalendarReadModel) (Calendar, error) {
	if rm == nil {
		return Calendar{}, errors.New("query.NewCalendar: nil read model")
	}
	return Calendar{rm: rm}, nil
}

// TimeZone returns the merchant's time zone.
func (c Calendar) TimeZone(ctx context.Context, merchantID string) (string, error) {
	return c.rm.TimeZone(ctx, merchantID)
}

// StaffHours returns a staff member's working hours.
func (c Calendar) StaffHours(ctx context.Context, merchantID, staffID string) (availability.StaffHours, error) {
	return c.rm.StaffHours(ctx, merchantID, staffID)
}

// DefaultSlotStep is the grid of slots when a request gives none (the
// caller sets it: a Step of 0 is no grid, and refused).
const DefaultSlotStep = 15 * time.Minute

// Slots answers the bookable slots of q in the merchant's time zone (q's
// TimeZone is ignored; tz is the zone used). The query is checked before
// any calendar is read, but for the zone, which comes with the calendars.
func (c Calendar) Slots(ctx context.Context, merchantID string, q availability.Query) (page availability.Page, tz string, err error) {
	// availability.Slots checks the query again with the merchant's zone
	// (the range's length is on its clock).
	if err := q.ValidateBeforeZone(); err != nil {
		return availability.Page{}, "", err
	}
	// Jobs that end within a buffer of the range still push slots away.
	tz, staff, err := c.rm.Calendars(ctx, merchantID, q.StaffID, q.From.Add(-q.Buffer), q.To.Add(q.Buffer))
	if err != nil {
		return availability.Page{}, "", err
	}
	q.TimeZone = tz
	page, err = availability.Slots(q, staff)
	return page, tz, err
}
