package pubsub

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"

	"hearth/app/apperr"
	"hearth/app/command"
	"hearth/app/event"
	"hearth/app/order"
	"hearth/app/schedule"
	"hearth/app/servicerequest"
)

// Topics of the aggregates' events.
const (
	TopicServiceRequests = "service_requests"
	TopicSchedules       = "schedules"
)

// The streams of the three aggregates.
var (
	OrderStream          = Stream{Type: order.StreamType, Topic: TopicOrders, Decode: order.Decode}
	ServiceRequestStream = Stream{Type: servicerequest.StreamType, Topic: TopicServiceRequests, Decode: servicerequest.Decode}
	ScheduleStream       = Stream{Type: schedule.StreamType, Topic: TopicSchedules, Decode: schedule.Decode}
)

// Transactor implements command.Transactor on the event store.
type Transactor struct {
	store *Store
}

// NewTransactor returns the transactor.
func NewTransactor(store *Store) (*Transactor, error) {
	if store == nil {
		return nil, errors.New("pubsub.NewTransactor: nil store")
	}
	return &Transactor{store: store}, nil
}

// Run runs fn in one transaction and appends and publishes what it decided.
func (t *Transactor) Run(ctx context.Context, meta event.Meta, fn func(ctx context.Context, s command.Session) error) (command.Outcome, error) {
	var out command.Outcome
	err := t.store.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		s := &session{store: t.store, tx: tx.Tx, meta: meta, byID: map[string]*tracked{}}
		if err := fn(ctx, s); err != nil {
			return err
		}
		var err error
		out, err = s.commit(ctx, tx)
		return err
	})
	if err != nil {
		return command.Outcome{}, err
	}
	return out, nil
}

// aggregate is what every aggregate offers the session.
type aggregate interface {
	ID() string
	Version() int
	Changes() []event.Event
}

type tracked struct {
	stream Stream
	agg    aggregate
	loaded []event.Recorded
	pos    int64
}

type session struct {
	store   *Store
	tx      *sql.Tx
	meta    event.Meta
	byID    map[string]*tracked
	ordered []*tracked
}

func (s *session) track(t *tracked) {
	s.byID[t.agg.ID()] = t
	s.ordered = append(s.ordered, t)
}

// load loads and tracks one aggregate; loading it again returns the same one.
func load[A aggregate](ctx context.Context, s *session, st Stream, id string, rehydrate func([]event.Event) (A, error)) (A, error) {
	var zero A
	if t, ok := s.byID[id]; ok {
		a, ok := t.agg.(A)
		if !ok || t.stream.Type != st.Type {
			return zero, apperr.ErrNotFound
		}
		return a, nil
	}
	recs, pos, err := s.store.Load(ctx, s.tx, st, s.meta.MerchantID, id)
	if err != nil {
		return zero, err
	}
	events := make([]event.Event, len(recs))
	for i, r := range recs {
		events[i] = r.Event
	}
	a, err := rehydrate(events)
	if err != nil {
		return zero, fmt.Errorf("%s %s: %w", st.Type, id, err)
	}
	s.track(&tracked{stream: st, agg: a, loaded: recs, pos: pos})
	return a, nil
}

func (s *session) Order(ctx context.Context, id string) (*order.Order, error) {
	return load(ctx, s, OrderStream, id, order.Rehydrate)
}

func (s *session) ServiceRequest(ctx context.Context, id string) (*servicerequest.Request, error) {
	return load(ctx, s, ServiceRequestStream, id, servicerequest.Rehydrate)
}

func (s *session) Schedule(ctx context.Context, id string) (*schedule.Schedule, error) {
	return load(ctx, s, ScheduleStream, id, schedule.Rehydrate)
}

func (s *session) AddOrder(o *order.Order) { s.track(&tracked{stream: OrderStream, agg: o}) }
func (s *session) AddServiceRequest(r *servicerequest.Request) {
	s.track(&tracked{stream: ServiceRequestStream, agg: r})
}
func (s *session) AddSchedule(sch *schedule.Schedule) {
	s.track(&tracked{stream: ScheduleStream, agg: sch})
}

// commit appends every tracked aggregate's changes, in the order the use
// case touched them.
func (s *session) commit(ctx context.Context, tx bun.Tx) (command.Outcome, error) {
	out := command.Outcome{Streams: make(map[string]command.Written, len(s.ordered))}
	for _, t := range s.ordered {
		recs, pos, err := s.store.Append(ctx, tx, t.stream, s.meta, t.agg.ID(), t.agg.Version(), t.agg.Changes())
		if err != nil {
			return command.Outcome{}, err
		}
		pos = max(pos, t.pos)
		out.Streams[t.agg.ID()] = command.Written{Stream: append(t.loaded, recs...), Appended: len(recs), Position: pos}
		out.Position = max(out.Position, pos)
	}
	return out, nil
}

func (s *session) LiveSchedule(ctx context.Context, orderID string) (*schedule.Schedule, bool, error) {
	var id string
	err := s.tx.QueryRowContext(ctx, `SELECT schedule_id FROM bookings WHERE order_id = $1 AND merchant_id = $2 AND live`,
		orderID, s.meta.MerchantID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("find live schedule of order %s: %w", orderID, err)
	}
	sch, err := s.Schedule(ctx, id)
	return sch, err == nil, err
}

// Book writes the schedule's booking. The insert runs under a savepoint so
// that, when the exclusion constraint refuses it, the transaction can still
// name the schedule it clashed with.
func (s *session) Book(ctx context.Context, sch *schedule.Schedule) error {
	if !sch.Status().Live() {
		if _, err := s.tx.ExecContext(ctx, `UPDATE bookings SET live = false WHERE schedule_id = $1`, sch.ID()); err != nil {
			return fmt.Errorf("release booking of schedule %s: %w", sch.ID(), err)
		}
		return nil
	}
	w := sch.Window()
	if _, err := s.tx.ExecContext(ctx, `SAVEPOINT book`); err != nil {
		return err
	}
	_, err := s.tx.ExecContext(ctx, `
		INSERT INTO bookings (schedule_id, merchant_id, order_id, staff_id, period, live)
		VALUES ($1, $2, $3, $4, tstzrange($5, $6, '[)'), true)
		ON CONFLICT (schedule_id) DO UPDATE SET staff_id = excluded.staff_id, period = excluded.period, live = true`,
		sch.ID(), s.meta.MerchantID, sch.OrderID(), w.StaffID, w.StartAt, w.EndAt)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		_, err = s.tx.ExecContext(ctx, `RELEASE SAVEPOINT book`)
		return err
	case errors.As(err, &pgErr) && pgErr.ConstraintName == "bookings_no_double_booking":
		if _, rbErr := s.tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT book`); rbErr != nil {
			return errors.Join(err, rbErr)
		}
		return s.clash(ctx, sch)
	case errors.As(err, &pgErr) && pgErr.ConstraintName == "bookings_one_live_per_order":
		return &apperr.ConflictError{Detail: fmt.Sprintf("order %s already has a live schedule", sch.OrderID())}
	default:
		return fmt.Errorf("book schedule %s: %w", sch.ID(), err)
	}
}

// clash names the live booking that overlaps sch.
func (s *session) clash(ctx context.Context, sch *schedule.Schedule) error {
	w := sch.Window()
	var other string
	var start, end time.Time
	err := s.tx.QueryRowContext(ctx, `
		SELECT schedule_id, lower(period), upper(period) FROM bookings
		WHERE staff_id = $1 AND live AND schedule_id <> $2 AND period && tstzrange($3, $4, '[)')
		LIMIT 1`, w.StaffID, sch.ID(), w.StartAt, w.EndAt).Scan(&other, &start, &end)
	if err != nil {
		// The clashing transaction is gone (rolled back) or not yet visible:
		// a conflict all the same; the client retries.
		return &apperr.ConflictError{Detail: fmt.Sprintf("staff member %s is already booked between %s and %s", w.StaffID,
			w.StartAt.Format(time.RFC3339), w.EndAt.Format(time.RFC3339))}
	}
	return &apperr.ConflictError{
		Detail: fmt.Sprintf("staff member %s is already booked by schedule %s from %s to %s", w.StaffID, other,
			start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339)),
		With: map[string]string{"conflicting_schedule_id": other},
	}
}

func (s *session) CustomerExists(ctx context.Context, id string) (bool, error) {
	var ok bool
	err := s.tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM customers WHERE id = $1 AND merchant_id = $2)`, id, s.meta.MerchantID).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("check customer: %w", err)
	}
	return ok, nil
}

func (s *session) StaffActive(ctx context.Context, id string) (exists, active bool, err error) {
	err = s.tx.QueryRowContext(ctx, `SELECT active FROM staff WHERE id = $1 AND merchant_id = $2`, id, s.meta.MerchantID).Scan(&active)
	if errors.Is(err, sql.ErrNoRows) {
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("check staff: %w", err)
	}
	return true, active, nil
}

func (s *session) CatalogItem(ctx context.Context, id string) (price int64, active, found bool, err error) {
	err = s.tx.QueryRowContext(ctx, `SELECT base_price_cents, active FROM catalog_items WHERE id = $1 AND merchant_id = $2`,
		id, s.meta.MerchantID).Scan(&price, &active)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, false, nil
	}
	if err != nil {
		return 0, false, false, fmt.Errorf("check catalog item: %w", err)
	}
	return price, active, true, nil
}
