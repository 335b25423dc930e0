package availability

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/uuid"
)

// StaffHours is one staff member's working hours as a merchant writes and
// stores them: the weekly pattern, the dated exceptions and the catalog
// items the staff member does (a query for an item keeps only those who
// list it).
type StaffHours struct {
	StaffID        string
	Week           Week
	Exceptions     []Exception
	CatalogItemIDs []string
	UpdatedAt      time.Time
	// Version moves on with every write (0: never written); a write that
	// states the version it read is refused once it has moved on.
	Version int
}

// The bounds of a record a merchant writes. Every availability query walks
// each staff member's shifts over its range, and every instance keeps the
// parsed records of many merchants: one record of thousands of one-minute
// shifts, or of a lifetime of exceptions, would cost every tenant.
const (
	MaxShiftsPerDay = 24
	MaxExceptions   = 1000
	MaxCatalogItems = 1000
)

// Check validates the record: its pattern and exceptions
// (NewWorkingHours), their bounds, and its catalog item ids; every error
// names its field.
func (h StaffHours) Check() error {
	var errs apperr.Fields
	for wd, shifts := range h.Week {
		if len(shifts) > MaxShiftsPerDay {
			errs.Add("week."+strings.ToLower(time.Weekday(wd).String()), "must have at most %d shifts, got %d", MaxShiftsPerDay, len(shifts))
		}
	}
	if len(h.Exceptions) > MaxExceptions {
		errs.Add("exceptions", "must be at most %d, got %d (remove those long past)", MaxExceptions, len(h.Exceptions))
	}
	for i, e := range h.Exceptions {
		if len(e.Shifts) > MaxShiftsPerDay {
			errs.Add(fmt.Sprintf("exceptions[%d].shifts", i), "must be at most %d, got %d", MaxShiftsPerDay, len(e.Shifts))
		}
	}
	if len(h.CatalogItemIDs) > MaxCatalogItems {
		errs.Add("catalog_item_ids", "must be at most %d, got %d", MaxCatalogItems, len(h.CatalogItemIDs))
	}
	if _, err := NewWorkingHours(h.Week, h.Exceptions); err != nil {
		var v *apperr.ValidationError
		if !errors.As(err, &v) {
			return err
		}
		errs = append(errs, v.Fields...)
	}
	for i, id := range h.CatalogItemIDs {
		if !uuid.Valid(id) {
			errs.Add(fmt.Sprintf("catalog_item_ids[%d]", i), "must be a UUID")
		}
	}
	return errs.Err()
}

// Validate checks a query as Slots does, without answering it.
func (q Query) Validate() error {
	_, err := q.check(false)
	return err
}

// ValidateBeforeZone checks what of a query does not depend on its zone,
// for a caller that learns the zone with the calendars: the zone is not
// checked, and the range is refused only when it is too long on the clock
// of any zone. Slots then checks the whole query.
func (q Query) ValidateBeforeZone() error {
	_, err := q.check(true)
	return err
}
