package command

import (
	"context"
	"errors"
	"slices"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/availability"
	"hearth/domain/civil"
	"hearth/domain/event"
	"hearth/domain/uuid"
)

// CalendarStore stores the merchant's calendar settings: its time zone
// and its staff members' working hours (reference data, in the event
// store's database).
type CalendarStore interface {
	// SetTimeZone sets the merchant's time zone and records the entry
	// audit returns for the zone it had, in one transaction.
	SetTimeZone(ctx context.Context, merchantID, name string, audit func(before string) Audit) error
	// PutStaffHours replaces the staff member's working hours and returns
	// their new version; apperr.ErrNotFound when the merchant has no such
	// staff member, *apperr.VersionError when expected is set and the
	// stored version is another.
	PutStaffHours(ctx context.Context, merchantID string, h availability.StaffHours, expected *int) (int, error)
}

// Calendar changes the merchant's time zone and its staff members'
// working hours.
type Calendar struct {
	store CalendarStore
}

// NewCalendar checks its dependency.
func NewCalendar(store CalendarStore) (Calendar, error) {
	if store == nil {
		return Calendar{}, errors.New("command.NewCalendar: nil store")
	}
	return Calendar{store: store}, nil
}

// ActionSettingsUpdate is the audit action of a change of the settings.
const ActionSettingsUpdate = "settings.update"

// SetTimeZone sets the merchant's time zone, an IANA name, as done by
// actor. Plans created afterwards take it; existing plans keep the zone
// they were created in. The change is in the audit log with the zone
// before it: a wrong zone places every later plan's visits hours off, and
// the first question is who set it, and from what.
func (c Calendar) SetTimeZone(ctx context.Context, merchantID, actor, name string) error {
	if _, err := civil.LoadZone("time_zone", name); err != nil {
		return err
	}
	return c.store.SetTimeZone(ctx, merchantID, name, func(before string) Audit {
		return Audit{Actor: actor, Action: ActionSettingsUpdate, Target: "merchant/" + merchantID,
			Details: map[string]any{"time_zone": name, "time_zone_before": before}}
	})
}

// PutStaffHours replaces a staff member's working hours, exceptions and
// catalog items; with expected set, only while they are at that version
// (0: never written).
func (c Calendar) PutStaffHours(ctx context.Context, merchantID string, h availability.StaffHours, expected *int, now time.Time) (availability.StaffHours, error) {
	if !uuid.Valid(h.StaffID) {
		return h, apperr.ErrNotFound
	}
	if err := h.Check(); err != nil {
		return h, err
	}
	h.CatalogItemIDs = append([]string{}, h.CatalogItemIDs...)
	h.Exceptions = append([]availability.Exception{}, h.Exceptions...)
	for i := range h.Week {
		h.Week[i] = append([]availability.Shift{}, h.Week[i]...)
	}
	slices.Sort(h.CatalogItemIDs)
	h.CatalogItemIDs = slices.Compact(h.CatalogItemIDs)
	slices.SortFunc(h.Exceptions, func(a, b availability.Exception) int { return a.Date.Compare(b.Date) })
	h.UpdatedAt = event.Instant(now)
	var err error
	h.Version, err = c.store.PutStaffHours(ctx, merchantID, h, expected)
	return h, err
}
