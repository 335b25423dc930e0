package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"golang.org/x/sync/errgroup"

	"hearth/app/command"
	"hearth/domain/availability"
	"hearth/domain/civil"
	"hearth/domain/event"
	"hearth/domain/uuid"
)

// The availability run: a merchant in Europe/London with availabilityStaff
// staff members working Monday to Friday, 08:00 to 18:00, and
// availabilitySchedules schedules over two weeks (each staff member's one
// 90-minute job a working day, made by the order commands, as the API
// makes them). One client asks GET /v1/availability for the two weeks'
// two-hour slots (15-minute buffer, first page of 50), of everyone and of
// one staff member, for availabilityFor each, in availabilityTurns turns
// with the plain SQL read of the same schedules' bookings.
var (
	availabilityStaff     = 50
	availabilitySchedules = 500
	availabilityFor       = 12 * time.Second
)

const (
	availabilityTurns  = 4
	availabilityTarget = 20 * time.Millisecond // p99
)

func (b *bench) availability(ctx context.Context) ([]row, error) {
	es, dbURL, ref, keys, err := b.merchants(ctx, "availability", "availability")
	if err != nil {
		return nil, err
	}
	defer es.Close()
	key := keys[0]
	merchantID := key.MerchantID
	if err := ref.SetTimeZone(ctx, merchantID, "Europe/London", func(before string) command.Audit {
		return command.Audit{Actor: "bench", Action: command.ActionSettingsUpdate, Target: "merchant/" + merchantID, Details: map[string]any{"time_zone_before": before}}
	}); err != nil {
		return nil, err
	}
	var week availability.Week
	for wd := time.Monday; wd <= time.Friday; wd++ {
		week[wd] = []availability.Shift{{Start: civil.At(8, 0), End: civil.At(18, 0)}}
	}
	staff := make([]string, availabilityStaff)
	for i := range staff {
		if staff[i], err = ref.CreateStaff(ctx, merchantID, fmt.Sprintf("Staff member %02d", i+1)); err != nil {
			return nil, err
		}
		if _, err := ref.PutStaffHours(ctx, merchantID, availability.StaffHours{StaffID: staff[i], Week: week,
			Exceptions: []availability.Exception{}, CatalogItemIDs: []string{}, UpdatedAt: time.Now()}, nil); err != nil {
			return nil, err
		}
	}
	customerID := uuid.New()
	if _, err := es.ExecContext(ctx, `INSERT INTO customers (id, merchant_id, name) VALUES (?, ?, 'Ada')`, customerID, merchantID); err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	monday := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC).AddDate(0, 0, 7-(int(now.Weekday())+6)%7)
	from, to := monday, monday.AddDate(0, 0, 14)
	b.progress("availability: %d staff, %d schedules over the two weeks from %s", availabilityStaff, availabilitySchedules, monday.Format(time.DateOnly))
	if err := seedSchedules(ctx, es, merchantID, customerID, staff, monday); err != nil {
		return nil, err
	}

	hearth, base, err := b.start(ctx, hearthRun{name: "availability, mode api", url: dbURL, mode: "api",
		// A closed loop of one key: the fair-share limits are off (as in
		// the other throughput runs), the key cache on as deployed.
		env: []string{"KEY_CACHE_TTL=5s"}})
	if err != nil {
		return nil, err
	}
	defer b.stopHearth(hearth)

	query := url.Values{"from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)},
		"duration": {"120"}, "buffer": {"15"}, "page_size": {"50"}}
	bookings := `SELECT staff_id, lower(period), upper(period) FROM bookings
		WHERE merchant_id = $1 AND live AND period && tstzrange($2, $3, '[)')`
	var rows []row
	for _, c := range []struct {
		who     string
		staffID string
		jobs    int
	}{
		{"everyone", "", availabilitySchedules},
		{"one staff member", staff[0], availabilitySchedules / availabilityStaff},
	} {
		q, plainSQL, args := query, bookings, []any{merchantID, from, to}
		if c.staffID != "" {
			q = maps.Clone(query)
			q.Set("staff_id", c.staffID)
			plainSQL, args = bookings+` AND staff_id = $4`, append(args, c.staffID)
		}
		path := "/v1/availability?" + q.Encode()
		if err := checkSlots(ctx, base+path, key.Secret); err != nil {
			return nil, fmt.Errorf("availability of %s: %w", c.who, err)
		}
		request := []byte(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: hearth\r\nAuthorization: Bearer %s\r\n\r\n", path, key.Secret))
		client := &httpClient{addr: strings.TrimPrefix(base, "http://")}
		b.progress("availability of %s: GET /v1/availability, then the plain SQL read, in %d turns, %s each in all", c.who, availabilityTurns, availabilityFor)
		var api, plain stats
		for range availabilityTurns {
			s, err := closedLoop(availabilityFor/availabilityTurns, func() error {
				status, err := client.do(request)
				if err == nil && status != http.StatusOK {
					err = fmt.Errorf("GET /v1/availability: status %d", status)
				}
				return err
			})
			if err != nil {
				client.close()
				return nil, err
			}
			api = append(api, s...)
			if s, err = closedLoop(availabilityFor/availabilityTurns, func() error {
				return readBookings(ctx, es.DB, plainSQL, args, c.jobs)
			}); err != nil {
				client.close()
				return nil, err
			}
			plain = append(plain, s...)
		}
		client.close()
		b.sampleRSS(hearth)
		rows = append(rows, row{
			fmt.Sprintf("availability: GET /v1/availability of %s, %d staff, %d schedules, two weeks of 2-hour slots, first page of 50, %s (p50 / p99 / max)",
				c.who, availabilityStaff, availabilitySchedules, availabilityFor),
			api.String(), plain.String(),
			fmt.Sprintf("target p99 <= %s: %s. One client, Hearth in mode api (key cache on); plain: the same %d bookings read by one SQL statement from Go, in %d turns with Hearth",
				ms(availabilityTarget), metOrNot(api.pct(0.99) <= availabilityTarget), c.jobs, availabilityTurns),
		})
	}
	return rows, nil
}

// seedSchedules creates the schedules through the order commands: staff
// member i%n's job on the working day i/n of the two weeks from monday, at
// 08:00, 10:00, ... 16:00 UTC in turn, 90 minutes long.
func seedSchedules(ctx context.Context, es *bun.DB, merchantID, customerID string, staff []string, monday time.Time) error {
	orders, err := orderHandlers(es)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range availabilitySchedules {
		g.Go(func() error {
			meta := func() event.Meta {
				return event.Meta{MerchantID: merchantID, Actor: "bench", CorrelationID: uuid.New(), OccurredAt: time.Now()}
			}
			w, err := orders.Create(gctx, command.CreateOrder{Meta: meta(), CustomerID: customerID, AmountCents: 9000})
			if err != nil {
				return err
			}
			day := i / len(staff)
			start := monday.AddDate(0, 0, 7*(day/5)+day%5).Add(time.Duration(8+(i%5)*2) * time.Hour)
			_, err = orders.Assign(gctx, command.AssignOrder{OrderTarget: command.OrderTarget{Meta: meta(), OrderID: w.Stream[0].StreamID},
				StaffID: staff[i%len(staff)], StartAt: start, EndAt: start.Add(90 * time.Minute)})
			return err
		})
	}
	return g.Wait()
}

// checkSlots asks url once and checks the answer is a full page of slots.
func checkSlots(ctx context.Context, url, key string) error {
	res, body, err := send(ctx, http.DefaultClient, http.MethodGet, url, key, nil)
	if err != nil {
		return err
	}
	var page struct {
		Items []json.RawMessage `json:"items"`
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %s", res.StatusCode, body)
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return err
	}
	if len(page.Items) != 50 {
		return fmt.Errorf("%d slots, not a page of 50: %s", len(page.Items), body)
	}
	return nil
}

// readBookings runs the plain SQL read and checks it read want bookings.
func readBookings(ctx context.Context, db *sql.DB, query string, args []any, want int) error {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	n := 0
	for rows.Next() {
		var staffID string
		var start, end time.Time
		if err := rows.Scan(&staffID, &start, &end); err != nil {
			rows.Close()
			return err
		}
		n++
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if n != want {
		return fmt.Errorf("the plain SQL read %d bookings, not %d", n, want)
	}
	return rows.Err()
}

// closedLoop runs once again and again for d, each call after the last
// answered, and returns how long each took.
func closedLoop(d time.Duration, once func() error) (stats, error) {
	var out stats
	for end := time.Now().Add(d); time.Now().Before(end); {
		start := time.Now()
		if err := once(); err != nil {
			return out, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}
