package refdata_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/availability"
	"hearth/domain/civil"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
	"hearth/internal/refdata"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// calendar is a merchant in Europe/London with staff members working
// Monday to Friday, 08:00 to 18:00, and their bookings.
type calendar struct {
	db       *bun.DB
	store    *refdata.Store
	merchant string
	staff    []string
}

func newCalendar(t testing.TB, staff int) calendar {
	return newCalendarIn(t, pgtest.Open(t, pgtest.NewDB(t).EventStore), staff)
}

// newCalendarIn is newCalendar, for another merchant in db.
func newCalendarIn(t testing.TB, db *bun.DB, staff int) calendar {
	store, err := refdata.New(db)
	require.NoError(t, err)
	c := calendar{db: db, store: store, merchant: uuid.New()}
	_, err = db.DB.Exec(`INSERT INTO merchants (id, name, time_zone) VALUES ($1, $2, 'Europe/London')`, c.merchant, "m-"+c.merchant)
	require.NoError(t, err)
	var week availability.Week
	for wd := time.Monday; wd <= time.Friday; wd++ {
		week[wd] = []availability.Shift{{Start: civil.At(8, 0), End: civil.At(18, 0)}}
	}
	for range staff {
		id := uuid.New()
		_, err := db.DB.Exec(`INSERT INTO staff (id, merchant_id, name) VALUES ($1, $2, 'S')`, id, c.merchant)
		require.NoError(t, err)
		_, err = store.PutStaffHours(t.Context(), c.merchant, availability.StaffHours{StaffID: id, Week: week,
			Exceptions: []availability.Exception{}, CatalogItemIDs: []string{}, UpdatedAt: time.Now()}, nil)
		require.NoError(t, err)
		c.staff = append(c.staff, id)
	}
	sort.Strings(c.staff)
	return c
}

func (c calendar) book(t testing.TB, staffID string, start time.Time, d time.Duration) {
	_, err := c.db.DB.Exec(`INSERT INTO bookings (schedule_id, merchant_id, order_id, staff_id, period, live)
		VALUES ($1, $2, $3, $4, tstzrange($5, $6, '[)'), true)`, uuid.New(), c.merchant, uuid.New(), staffID, start, start.Add(d))
	require.NoError(t, err)
}

// Calendars reads the merchant's active staff members with their hours
// and their live bookings in the range, and nobody else's.
func TestCalendars(t *testing.T) {
	t.Parallel()
	c := newCalendar(t, 3)
	other := newCalendarIn(t, c.db, 1)
	monday := time.Date(2031, 3, 3, 0, 0, 0, 0, time.UTC)
	c.book(t, c.staff[0], monday.Add(9*time.Hour), time.Hour)
	c.book(t, c.staff[0], monday.AddDate(0, 0, 9), time.Hour) // outside the range
	c.book(t, c.staff[1], monday.Add(11*time.Hour), 30*time.Minute)
	other.book(t, other.staff[0], monday.Add(9*time.Hour), time.Hour)
	_, err := c.db.DB.Exec(`UPDATE staff SET active = false WHERE id = $1`, c.staff[2])
	require.NoError(t, err)

	tz, got, err := c.store.Calendars(t.Context(), c.merchant, "", monday, monday.AddDate(0, 0, 7))
	require.NoError(t, err)
	require.Equal(t, "Europe/London", tz)
	require.Len(t, got, 2, "active staff members only")
	require.Equal(t, []string{c.staff[0], c.staff[1]}, []string{got[0].ID, got[1].ID})
	require.Equal(t, []availability.Interval{{Start: monday.Add(9 * time.Hour), End: monday.Add(10 * time.Hour)}},
		[]availability.Interval{{Start: got[0].Busy[0].Start.UTC(), End: got[0].Busy[0].End.UTC()}})
	require.Len(t, got[0].Busy, 1)
	require.Len(t, got[1].Busy, 1, "each staff member's own bookings")
	require.Equal(t, monday.Add(11*time.Hour), got[1].Busy[0].Start.UTC())
	require.Len(t, got[0].Hours.ShiftsOn(civil.Date{Year: 2031, Month: 3, Day: 3}), 1)

	_, one, err := c.store.Calendars(t.Context(), c.merchant, c.staff[1], monday, monday.AddDate(0, 0, 7))
	require.NoError(t, err)
	require.Len(t, one, 1)
	require.Len(t, one[0].Busy, 1, "their booking, not another staff member's")
	_, none, err := c.store.Calendars(t.Context(), c.merchant, other.staff[0], monday, monday.AddDate(0, 0, 7))
	require.NoError(t, err)
	require.Empty(t, none, "another merchant's staff member is nobody here")
	_, _, err = c.store.Calendars(t.Context(), uuid.New(), "", monday, monday.AddDate(0, 0, 7))
	require.ErrorIs(t, err, apperr.ErrNotFound)
}

// Calendars keep parsed working hours between reads: a change of a staff
// member's hours is read at once, never the hours parsed before it.
func TestCalendarsReadChangedHours(t *testing.T) {
	t.Parallel()
	c := newCalendar(t, 1)
	monday := time.Date(2031, 3, 3, 0, 0, 0, 0, time.UTC)
	shifts := func() []availability.Shift {
		_, got, err := c.store.Calendars(t.Context(), c.merchant, "", monday, monday.AddDate(0, 0, 7))
		require.NoError(t, err)
		require.Len(t, got, 1)
		return got[0].Hours.ShiftsOn(civil.Date{Year: 2031, Month: 3, Day: 3})
	}
	require.Equal(t, []availability.Shift{{Start: civil.At(8, 0), End: civil.At(18, 0)}}, shifts())
	var week availability.Week
	week[time.Monday] = []availability.Shift{{Start: civil.At(10, 0), End: civil.At(12, 0)}}
	_, err := c.store.PutStaffHours(t.Context(), c.merchant, availability.StaffHours{StaffID: c.staff[0], Week: week,
		Exceptions: []availability.Exception{}, CatalogItemIDs: []string{}, UpdatedAt: time.Now()}, nil)
	require.NoError(t, err)
	require.Equal(t, []availability.Shift{{Start: civil.At(10, 0), End: civil.At(12, 0)}}, shifts())
}

// BenchmarkAvailabilityQuery answers two weeks of two-hour slots for 50
// staff members with 500 bookings (query.Calendar.Slots: the time zone,
// the calendars and the bookings from Postgres, then availability.Slots),
// beside a plain SQL read of the same bookings, in the same run. p99-ms
// is each one's 99th percentile.
func BenchmarkAvailabilityQuery(b *testing.B) {
	c := newCalendar(b, 50)
	monday := time.Date(2031, 3, 3, 0, 0, 0, 0, time.UTC)
	for i := range 500 {
		day := monday.AddDate(0, 0, (i/50)%14)
		c.book(b, c.staff[i%50], day.Add(time.Duration(8+(i%5)*2)*time.Hour), 90*time.Minute)
	}
	cal, err := query.NewCalendar(c.store)
	require.NoError(b, err)
	q := availability.Query{From: monday, To: monday.AddDate(0, 0, 14), Duration: 2 * time.Hour, Buffer: 15 * time.Minute, Step: query.DefaultSlotStep, Limit: 50}
	p99 := func(b *testing.B, run func()) {
		var took []time.Duration
		for b.Loop() {
			start := time.Now()
			run()
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
	}
	b.Run("slots", func(b *testing.B) {
		p99(b, func() {
			page, _, err := cal.Slots(b.Context(), c.merchant, q)
			if err != nil || len(page.Slots) != 50 {
				b.Fatalf("slots: %d, %v", len(page.Slots), err)
			}
		})
	})
	b.Run("plain-sql", func(b *testing.B) {
		p99(b, func() {
			rows, err := c.db.DB.QueryContext(b.Context(), `SELECT staff_id, lower(period), upper(period) FROM bookings
				WHERE merchant_id = $1 AND live AND period && tstzrange($2, $3, '[)')`, c.merchant, q.From, q.To)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for rows.Next() {
				n++
			}
			if rows.Close(); n != 500 {
				b.Fatalf("read %d bookings", n)
			}
		})
	})
}

// A write that states the version it read is refused once the hours have
// moved on, and changes nothing; one that states none replaces them. A
// staff member without hours is at version 0.
func TestPutStaffHoursStatesTheVersionItRead(t *testing.T) {
	t.Parallel()
	c := newCalendar(t, 1)
	ctx := t.Context()
	at := func(h int) availability.StaffHours {
		var week availability.Week
		week[time.Monday] = []availability.Shift{{Start: civil.At(h, 0), End: civil.At(h+1, 0)}}
		return availability.StaffHours{StaffID: c.staff[0], Week: week, Exceptions: []availability.Exception{}, CatalogItemIDs: []string{}, UpdatedAt: time.Now()}
	}
	put := func(h availability.StaffHours, expected *int) (int, error) {
		return c.store.PutStaffHours(ctx, c.merchant, h, expected)
	}
	mondayStarts := func(staffID string) int {
		h, err := c.store.StaffHours(ctx, c.merchant, staffID)
		require.NoError(t, err)
		return int(h.Week[time.Monday][0].Start.Duration().Hours())
	}
	stored, err := c.store.StaffHours(ctx, c.merchant, c.staff[0])
	require.NoError(t, err)
	require.Equal(t, 1, stored.Version)

	v, err := put(at(9), &stored.Version)
	require.NoError(t, err)
	require.Equal(t, 2, v)
	_, err = put(at(10), &stored.Version)
	var stale *apperr.VersionError
	require.ErrorAs(t, err, &stale)
	require.Equal(t, apperr.VersionError{Kind: "working hours of staff member", ID: c.staff[0], Expected: 1, Actual: 2}, *stale)
	require.Equal(t, 9, mondayStarts(c.staff[0]), "the refused write changed nothing")
	v, err = put(at(11), nil)
	require.NoError(t, err)
	require.Equal(t, 3, v)
	require.Equal(t, 11, mondayStarts(c.staff[0]))

	// A staff member without hours: version 0.
	fresh := uuid.New()
	_, err = c.db.DB.Exec(`INSERT INTO staff (id, merchant_id, name) VALUES ($1, $2, 'T')`, fresh, c.merchant)
	require.NoError(t, err)
	none, err := c.store.StaffHours(ctx, c.merchant, fresh)
	require.NoError(t, err)
	require.Equal(t, 0, none.Version)
	h := at(8)
	h.StaffID = fresh
	one := 1
	_, err = put(h, &one)
	require.ErrorAs(t, err, &stale)
	require.Equal(t, 0, stale.Actual)
	v, err = put(h, &none.Version)
	require.NoError(t, err)
	require.Equal(t, 1, v)
	_, err = put(h, &none.Version)
	require.ErrorAs(t, err, &stale, "a second first write")
	require.Equal(t, 1, stale.Actual)

	h.StaffID = uuid.New()
	_, err = put(h, &none.Version)
	require.ErrorIs(t, err, apperr.ErrNotFound)
}

// With an idempotency key, the hours and the answer a retry gets are
// stored in one transaction: when the answer cannot be stored, neither are
// the hours (a retry after a crash between the two would be refused by
// its own write's version).
func TestPutStaffHoursStoresItsAnswerWithTheHours(t *testing.T) {
	t.Parallel()
	c := newCalendar(t, 1)
	before, err := c.store.StaffHours(t.Context(), c.merchant, c.staff[0])
	require.NoError(t, err)
	var week availability.Week
	week[time.Friday] = []availability.Shift{{Start: civil.At(9, 0), End: civil.At(10, 0)}}
	i := &command.Idempotent{MerchantID: c.merchant, Key: "k", Token: uuid.New(),
		Render: func(context.Context, any) (command.Answer, error) { return command.Answer{}, errors.New("no answer") }}
	_, err = c.store.PutStaffHours(command.WithIdempotent(t.Context(), i), c.merchant, availability.StaffHours{StaffID: c.staff[0],
		Week: week, Exceptions: []availability.Exception{}, CatalogItemIDs: []string{}, UpdatedAt: time.Now()}, nil)
	require.ErrorContains(t, err, "no answer")
	after, err := c.store.StaffHours(t.Context(), c.merchant, c.staff[0])
	require.NoError(t, err)
	require.Equal(t, before, after, "nothing written")
}

// The hours name catalog items of the merchant only: another merchant's
// item is refused as an unknown one, and nothing is written.
func TestPutStaffHoursNamesTheMerchantsCatalogItems(t *testing.T) {
	t.Parallel()
	c := newCalendar(t, 1)
	other := newCalendarIn(t, c.db, 0)
	ctx := t.Context()
	item := func(merchant string) string {
		id := uuid.New()
		_, err := c.db.DB.Exec(`INSERT INTO catalog_items (id, merchant_id, name, base_price_cents, created_at, updated_at)
			VALUES ($1, $2, 'Deep clean', 100, now(), now())`, id, merchant)
		require.NoError(t, err)
		return id
	}
	own, foreign, unknown := item(c.merchant), item(other.merchant), uuid.New()
	before, err := c.store.StaffHours(ctx, c.merchant, c.staff[0])
	require.NoError(t, err)
	put := func(items ...string) error {
		_, err := c.store.PutStaffHours(ctx, c.merchant, availability.StaffHours{StaffID: c.staff[0], Week: before.Week,
			Exceptions: []availability.Exception{}, CatalogItemIDs: items, UpdatedAt: time.Now()}, nil)
		return err
	}
	for name, items := range map[string][]string{"another merchant's": {own, foreign}, "unknown": {unknown}} {
		err := put(items...)
		var invalid *apperr.ValidationError
		require.ErrorAs(t, err, &invalid, name)
		require.Equal(t, "catalog_item_ids", invalid.Fields[0].Field, name)
		require.Contains(t, invalid.Fields[0].Message, items[len(items)-1], name)
		after, err := c.store.StaffHours(ctx, c.merchant, c.staff[0])
		require.NoError(t, err)
		require.Equal(t, before.Version, after.Version, "%s: nothing written", name)
	}
	require.NoError(t, put(own))
	after, err := c.store.StaffHours(ctx, c.merchant, c.staff[0])
	require.NoError(t, err)
	require.Equal(t, []string{own}, after.CatalogItemIDs)
}
