package refdata

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/availability"
)

// The calendar: the merchant's time zone and its staff members' working
// hours (command.CalendarStore, query.CalendarReadModel). Fixed texts with
// $n parameters on the raw pool: the availability query runs them on every
// request.

// SetTimeZone sets the merchant's time zone.
func (s *Store) SetTimeZone(ctx context.Context, merchantID, name string) error {
	res, err := s.db.DB.ExecContext(ctx, `UPDATE merchants SET time_zone = $2 WHERE id = $1`, merchantID, name)
	if err != nil {
		return fmt.Errorf("set time zone: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return apperr.ErrNotFound
	}
	return nil
}

// TimeZone returns the merchant's time zone.
func (s *Store) TimeZone(ctx context.Context, merchantID string) (string, error) {
	var tz string
	err := s.db.DB.QueryRowContext(ctx, `SELECT time_zone FROM merchants WHERE id = $1`, merchantID).Scan(&tz)
	if errors.Is(err, sql.ErrNoRows) {
		return "", apperr.ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("read time zone: %w", err)
	}
	return tz, nil
}

// PutStaffHours replaces a staff member's working hours, in the statement
// that checks the staff member is the merchant's.
func (s *Store) PutStaffHours(ctx context.Context, merchantID string, h availability.StaffHours) error {
	week, err := json.Marshal(h.Week)
	if err != nil {
		return fmt.Errorf("marshal week: %w", err)
	}
	exceptions, err := json.Marshal(h.Exceptions)
	if err != nil {
		return fmt.Errorf("marshal exceptions: %w", err)
	}
	items, err := json.Marshal(h.CatalogItemIDs)
	if err != nil {
		return fmt.Errorf("marshal catalog items: %w", err)
	}
	res, err := s.db.DB.ExecContext(ctx, `
		INSERT INTO staff_hours (staff_id, merchant_id, week, exceptions, catalog_item_ids, updated_at)
		SELECT id, merchant_id, $3::jsonb, $4::jsonb, ARRAY(SELECT jsonb_array_elements_text($5::jsonb))::uuid[], $6
		FROM staff WHERE id = $1 AND merchant_id = $2
		ON CONFLICT (staff_id) DO UPDATE SET week = excluded.week, exceptions = excluded.exceptions,
			catalog_item_ids = excluded.catalog_item_ids, updated_at = excluded.updated_at`,
		h.StaffID, merchantID, string(week), string(exceptions), string(items), h.UpdatedAt)
	if err != nil {
		return fmt.Errorf("put staff hours: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return apperr.ErrNotFound
	}
	return nil
}

const staffHoursSQL = `
	SELECT s.id, coalesce(h.week, '[[],[],[],[],[],[],[]]'::jsonb)::text, coalesce(h.exceptions, '[]'::jsonb)::text,
	       coalesce(to_jsonb(h.catalog_item_ids), '[]'::jsonb)::text, coalesce(h.updated_at, s.created_at)
	FROM staff s LEFT JOIN staff_hours h ON h.staff_id = s.id
	WHERE s.merchant_id = $1`

func scanStaffHours(rows interface{ Scan(...any) error }) (availability.StaffHours, error) {
	var h availability.StaffHours
	var week, exceptions, items string
	if err := rows.Scan(&h.StaffID, &week, &exceptions, &items, &h.UpdatedAt); err != nil {
		return h, err
	}
	h.UpdatedAt = h.UpdatedAt.UTC()
	if err := errors.Join(json.Unmarshal([]byte(week), &h.Week), json.Unmarshal([]byte(exceptions), &h.Exceptions),
		json.Unmarshal([]byte(items), &h.CatalogItemIDs)); err != nil {
		return h, fmt.Errorf("staff hours of %s: %w", h.StaffID, err)
	}
	for i := range h.Week {
		if h.Week[i] == nil {
			h.Week[i] = []availability.Shift{}
		}
	}
	if h.Exceptions == nil {
		h.Exceptions = []availability.Exception{}
	}
	if h.CatalogItemIDs == nil {
		h.CatalogItemIDs = []string{}
	}
	return h, nil
}

// StaffHours returns one staff member's working hours (none set: an empty
// week).
func (s *Store) StaffHours(ctx context.Context, merchantID, staffID string) (availability.StaffHours, error) {
	h, err := scanStaffHours(s.db.DB.QueryRowContext(ctx, staffHoursSQL+` AND s.id = $2`, merchantID, staffID))
	if errors.Is(err, sql.ErrNoRows) {
		return h, apperr.ErrNotFound
	}
	return h, err
}

// Calendars returns the merchant's active staff members (only staffID when
// set) with their working hours and their live bookings overlapping
// [from, to): two statements, whatever the number of staff members.
func (s *Store) Calendars(ctx context.Context, merchantID, staffID string, from, to time.Time) ([]availability.Staff, error) {
	rows, err := s.db.DB.QueryContext(ctx, staffHoursSQL+` AND s.active AND ($2 = '' OR s.id::text = $2) ORDER BY s.id`, merchantID, staffID)
	if err != nil {
		return nil, fmt.Errorf("read calendars: %w", err)
	}
	var out []availability.Staff
	index := map[string]int{}
	for rows.Next() {
		h, err := scanStaffHours(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		wh, err := availability.NewWorkingHours(h.Week, h.Exceptions)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("working hours of %s: %w", h.StaffID, err)
		}
		index[h.StaffID] = len(out)
		out = append(out, availability.Staff{ID: h.StaffID, CatalogItems: h.CatalogItemIDs, Hours: wh})
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("read calendars: %w", err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	rows, err = s.db.DB.QueryContext(ctx, `
		SELECT staff_id, lower(period), upper(period) FROM bookings
		WHERE merchant_id = $1 AND live AND period && tstzrange($2, $3, '[)') AND ($4 = '' OR staff_id::text = $4)`,
		merchantID, from, to, staffID)
	if err != nil {
		return nil, fmt.Errorf("read bookings: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var b availability.Interval
		if err := rows.Scan(&id, &b.Start, &b.End); err != nil {
			return nil, err
		}
		if i, ok := index[id]; ok {
			out[i].Busy = append(out[i].Busy, b)
		}
	}
	return out, rows.Err()
}
