package refdata

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"hearth/app/command"
	"hearth/app/ops"
	"hearth/domain/apperr"
	"hearth/domain/availability"
	"hearth/internal/idempotency"
)

// The calendar: the merchant's time zone and its staff members' working
// hours (command.CalendarStore, query.CalendarReadModel). Fixed texts with
// $n parameters on the raw pool: the availability query runs them on every
// request.

// SetTimeZone sets the merchant's time zone and records audit's entry of
// the change, in a transaction whose first statement checks the request's
// key (inTx) and whose last stores the answer of an idempotent attempt
// (the zone set, as a *string), so that the zone is set exactly when its
// record and the answer are kept.
func (s *Store) SetTimeZone(ctx context.Context, merchantID, name string, audit func(before string) command.Audit) error {
	return inTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
		var before string
		err := tx.Tx.QueryRowContext(ctx, `UPDATE merchants m SET time_zone = $2
			FROM (SELECT id, time_zone FROM merchants WHERE id = $1 FOR UPDATE) old
			WHERE m.id = old.id RETURNING old.time_zone`, merchantID, name).Scan(&before)
		if errors.Is(err, sql.ErrNoRows) {
			return apperr.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("set time zone: %w", err)
		}
		a := audit(before)
		if err := WriteAudit(ctx, tx, ops.AuditEntry{Actor: a.Actor, Action: a.Action, Target: a.Target, Details: a.Details}); err != nil {
			return err
		}
		if i := command.IdempotentOf(ctx); i != nil {
			return idempotency.Seal(ctx, tx.Tx, i, &name)
		}
		return nil
	})
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
// that checks the staff member is the merchant's and, with expected set,
// that the stored version is that one (0: none stored). The version is
// compared on the row the update has locked, so of two writes that read
// the same version one is refused, whichever commits first; hours that do
// not exist yet are inserted only for 0 (a concurrent first write makes
// the other conflict, and so compare). An erased staff member's hours take
// no change (apperr.ConflictError): the statement shares the staff row's
// lock, so an erasure (which updates the row and deletes the hours) comes
// wholly before or after it. It returns the new version.
func (s *Store) PutStaffHours(ctx context.Context, merchantID string, h availability.StaffHours, expected *int) (int, error) {
	week, err := json.Marshal(h.Week)
	if err != nil {
		return 0, fmt.Errorf("marshal week: %w", err)
	}
	exceptions, err := json.Marshal(h.Exceptions)
	if err != nil {
		return 0, fmt.Errorf("marshal exceptions: %w", err)
	}
	items, err := json.Marshal(h.CatalogItemIDs)
	if err != nil {
		return 0, fmt.Errorf("marshal catalog items: %w", err)
	}
	if err := s.knownCatalogItems(ctx, merchantID, h.CatalogItemIDs); err != nil {
		return 0, err
	}
	var version int
	put := func(ctx context.Context, db interface {
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}) error {
		return db.QueryRowContext(ctx, `
		INSERT INTO staff_hours (staff_id, merchant_id, week, exceptions, catalog_item_ids, updated_at)
		SELECT id, merchant_id, $3::jsonb, $4::jsonb, ARRAY(SELECT jsonb_array_elements_text($5::jsonb))::uuid[], $6
		FROM staff WHERE id = $1 AND merchant_id = $2 AND erased_at IS NULL
		  AND ($7::int IS NULL OR $7 = 0 OR EXISTS (SELECT FROM staff_hours WHERE staff_id = $1))
		FOR SHARE OF staff
		ON CONFLICT (staff_id) DO UPDATE SET week = excluded.week, exceptions = excluded.exceptions,
			catalog_item_ids = excluded.catalog_item_ids, updated_at = excluded.updated_at, version = staff_hours.version + 1
		WHERE $7::int IS NULL OR staff_hours.version = $7
		RETURNING version`,
			h.StaffID, merchantID, string(week), string(exceptions), string(items), h.UpdatedAt, expected).Scan(&version)
	}
	if needsTx(ctx) {
		// The answer is stored with the hours, so that a retry after a
		// crash between the two is answered, not refused by its own write;
		// the request's key is checked before them (inTx).
		err = inTx(ctx, s.db, func(ctx context.Context, tx bun.Tx) error {
			if err := put(ctx, tx.Tx); err != nil {
				return err
			}
			if i := command.IdempotentOf(ctx); i != nil {
				h.Version = version
				return idempotency.Seal(ctx, tx.Tx, i, &h)
			}
			return nil
		})
	} else {
		err = put(ctx, s.db.DB)
	}
	if errors.Is(err, sql.ErrNoRows) {
		// No such staff member, one erased, or not at the expected version.
		var erased bool
		err := s.db.DB.QueryRowContext(ctx, `SELECT erased_at IS NOT NULL FROM staff WHERE id = $1 AND merchant_id = $2`,
			h.StaffID, merchantID).Scan(&erased)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return 0, apperr.ErrNotFound
		case err != nil:
			return 0, fmt.Errorf("put staff hours: %w", err)
		case erased: // the erasure deleted the hours, sick days and all: none come back
			return 0, &apperr.ConflictError{Detail: fmt.Sprintf("%s was erased and cannot be changed", h.StaffID)}
		}
		stored, err := s.StaffHours(ctx, merchantID, h.StaffID)
		if err != nil {
			return 0, err
		}
		if expected == nil { // the staff member was created meanwhile
			return 0, fmt.Errorf("put staff hours of %s: not written, try again", h.StaffID)
		}
		return 0, &apperr.VersionError{Kind: "working hours of staff member", ID: h.StaffID, Expected: *expected, Actual: stored.Version}
	}
	if err != nil {
		return 0, fmt.Errorf("put staff hours: %w", err)
	}
	return version, nil
}

// knownCatalogItems refuses ids that name no catalog item of the merchant:
// another merchant's is refused as an unknown one. Catalog items are never
// deleted (only made inactive), so none can go between this check and the
// write.
func (s *Store) knownCatalogItems(ctx context.Context, merchantID string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	rows, err := s.db.DB.QueryContext(ctx, `
		SELECT i::text FROM unnest($1::text[]::uuid[]) AS i
		WHERE NOT EXISTS (SELECT FROM catalog_items c WHERE c.id = i AND c.merchant_id = $2)
		ORDER BY i`, ids, merchantID)
	if err != nil {
		return fmt.Errorf("check catalog items: %w", err)
	}
	defer rows.Close()
	var unknown []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("check catalog items: %w", err)
		}
		unknown = append(unknown, id)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("check catalog items: %w", err)
	}
	if len(unknown) > 0 {
		return apperr.Invalid("catalog_item_ids", "no catalog item %s in this merchant", strings.Join(unknown, ", "))
	}
	return nil
}

const staffHoursSQL = `
	SELECT s.id, coalesce(h.week, '[[],[],[],[],[],[],[]]'::jsonb)::text, coalesce(h.exceptions, '[]'::jsonb)::text,
	       coalesce(to_jsonb(h.catalog_item_ids), '[]'::jsonb)::text, coalesce(h.updated_at, s.created_at),
	       coalesce(h.version, 0)
	FROM staff s LEFT JOIN staff_hours h ON h.staff_id = s.id
	WHERE s.merchant_id = $1`

func scanStaffHours(rows interface{ Scan(...any) error }) (availability.StaffHours, error) {
	var h availability.StaffHours
	var week, exceptions, items string
	if err := rows.Scan(&h.StaffID, &week, &exceptions, &items, &h.UpdatedAt, &h.Version); err != nil {
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

// calendarsSQL reads a merchant's time zone, its active staff members'
// working hours (only $2's when set) and their live bookings overlapping
// [$3, $4), as rows of one shape: a zone row has a zone, an hours row a
// week, a booking row a start.
const calendarsSQL = `
	SELECT ''::text, m.time_zone, NULL::text, NULL::text, NULL::text, NULL::timestamptz, NULL::timestamptz
	FROM merchants m WHERE m.id = $1
	UNION ALL
	SELECT h.id::text, NULL, h.week, h.exceptions, h.items, NULL, NULL
	FROM (` + staffHoursSQL + ` AND s.active AND ($2 = '' OR s.id::text = $2)) h(id, week, exceptions, items, updated_at)
	UNION ALL
	SELECT b.staff_id::text, NULL, NULL, NULL, NULL, lower(b.period), upper(b.period)
	FROM bookings b
	WHERE b.merchant_id = $1 AND b.live AND b.period && tstzrange($3, $4, '[)') AND ($2 = '' OR b.staff_id = nullif($2, '')::uuid)`

// Calendars returns the merchant's time zone and its active staff members
// (only staffID when set), ordered by id, with their working hours and
// their live bookings overlapping [from, to): one statement, one round
// trip, whatever the number of staff members; apperr.ErrNotFound when
// there is no such merchant.
func (s *Store) Calendars(ctx context.Context, merchantID, staffID string, from, to time.Time) (string, []availability.Staff, error) {
	rows, err := s.db.DB.QueryContext(ctx, calendarsSQL, merchantID, staffID, from, to)
	if err != nil {
		return "", nil, fmt.Errorf("read calendars: %w", err)
	}
	defer rows.Close()
	var (
		tz         sql.NullString
		out        []availability.Staff
		bookings   []booking
		id         string
		zone       sql.NullString
		week       sql.RawBytes // the three texts: valid until the next row
		exceptions sql.RawBytes
		items      sql.RawBytes
		start, end sql.NullTime
	)
	for rows.Next() {
		if err := rows.Scan(&id, &zone, &week, &exceptions, &items, &start, &end); err != nil {
			return "", nil, fmt.Errorf("read calendars: %w", err)
		}
		switch {
		case zone.Valid:
			tz = zone
		case week != nil:
			st, err := s.hours.parse(id, week, exceptions, items)
			if err != nil {
				return "", nil, err
			}
			out = append(out, st)
		case start.Valid:
			bookings = append(bookings, booking{id, availability.Interval{Start: start.Time, End: end.Time}})
		}
	}
	if err := rows.Err(); err != nil {
		return "", nil, fmt.Errorf("read calendars: %w", err)
	}
	if !tz.Valid {
		return "", nil, apperr.ErrNotFound
	}
	// The rows of a UNION ALL come in no promised order.
	slices.SortFunc(out, func(a, b availability.Staff) int { return strings.Compare(a.ID, b.ID) })
	attachBookings(out, bookings)
	return tz.String, out, nil
}

// booking is a row of a staff member's job.
type booking struct {
	staffID string
	availability.Interval
}

// attachBookings gives each staff member of out (ordered by id) their
// bookings, dropping those of anyone else, all in one array.
func attachBookings(out []availability.Staff, bookings []booking) {
	of := make([]int, len(bookings)) // index in out, -1 for nobody's
	count := make([]int, len(out))
	for i, b := range bookings {
		of[i] = -1
		if k, ok := slices.BinarySearchFunc(out, b.staffID, func(s availability.Staff, id string) int { return strings.Compare(s.ID, id) }); ok {
			of[i] = k
			count[k]++
		}
	}
	busy := make([]availability.Interval, 0, len(bookings))
	for k := range out {
		out[k].Busy = busy[len(busy) : len(busy) : len(busy)+count[k]]
		busy = busy[:len(busy)+count[k]]
	}
	for i, b := range bookings {
		if k := of[i]; k >= 0 {
			out[k].Busy = append(out[k].Busy, b.Interval)
		}
	}
}

// maxParsedHours and maxParsedBytes (of stored texts, which the parsed
// form follows in size) bound the parsed working hours kept: past either
// the cache starts afresh. Records are bounded (availability's Max...),
// but one merchant's many large ones must not pin the memory every
// tenant's requests share.
const (
	maxParsedHours = 10_000
	maxParsedBytes = 32 << 20
)

// parsedHours keeps staff members' working hours as parsed, with the
// stored texts they were parsed from. Every availability query reads every
// staff member's hours; a row whose texts are the ones kept is not decoded
// and checked again. Keyed by the texts, not by a time of change, a stale
// entry cannot be served: the texts are read in the same statement.
type parsedHours struct {
	mu      sync.Mutex
	byStaff map[string]parsedStaff
	bytes   int // of the texts kept
}

type parsedStaff struct {
	week, exceptions, items string
	staff                   availability.Staff // no time off, no jobs
}

// parse returns staff member id, without jobs, with the working hours of
// the stored texts (staffHoursSQL's columns): those parsed before when the
// texts are the same.
func (c *parsedHours) parse(id string, week, exceptions, items []byte) (availability.Staff, error) {
	c.mu.Lock()
	p, ok := c.byStaff[id]
	c.mu.Unlock()
	if ok && p.week == string(week) && p.exceptions == string(exceptions) && p.items == string(items) {
		return p.staff, nil
	}
	p = parsedStaff{week: string(week), exceptions: string(exceptions), items: string(items)}
	h := availability.StaffHours{StaffID: id}
	if err := errors.Join(json.Unmarshal(week, &h.Week), json.Unmarshal(exceptions, &h.Exceptions),
		json.Unmarshal(items, &h.CatalogItemIDs)); err != nil {
		return availability.Staff{}, fmt.Errorf("staff hours of %s: %w", id, err)
	}
	wh, err := availability.NewWorkingHours(h.Week, h.Exceptions)
	if err != nil {
		return availability.Staff{}, fmt.Errorf("working hours of %s: %w", id, err)
	}
	p.staff = availability.Staff{ID: id, CatalogItems: h.CatalogItemIDs, Hours: wh}
	size := len(week) + len(exceptions) + len(items)
	c.mu.Lock()
	if c.byStaff == nil || len(c.byStaff) >= maxParsedHours || c.bytes+size > maxParsedBytes {
		c.byStaff, c.bytes = map[string]parsedStaff{}, 0
	}
	if old, ok := c.byStaff[id]; ok {
		c.bytes -= len(old.week) + len(old.exceptions) + len(old.items)
	}
	c.byStaff[id] = p
	c.bytes += size
	c.mu.Unlock()
	return p.staff, nil
}
