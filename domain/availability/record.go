package availability

import (
	"errors"
	"fmt"
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

// Check validates the record: its pattern and exceptions
// (NewWorkingHours), and its catalog item ids; every error names its field.
func (h StaffHours) Check() error {
	var errs apperr.Fields
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
	_, err := q.check()
	return err
}
