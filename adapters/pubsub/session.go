package pubsub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"hearth/adapters/vault"
	"hearth/app/access"
	"hearth/app/command"
	"hearth/domain/apperr"
	"hearth/domain/availability"
	"hearth/domain/civil"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/plan"
	"hearth/domain/schedule"
	"hearth/domain/servicerequest"
	"hearth/internal/aggregates"
	"hearth/internal/database"
	"hearth/internal/idempotency"
	"hearth/internal/tracing"
)

// The streams and topics of the aggregates, read from the one registry
// (internal/aggregates), under the names the store's callers use.
var (
	OrderStream          = aggregates.Order.Facts
	ServiceRequestStream = aggregates.ServiceRequest.Facts
	ScheduleStream       = aggregates.Schedule.Facts
	PlanStream           = aggregates.Plan.Facts

	TopicOrders          = aggregates.Order.Topic
	TopicServiceRequests = aggregates.ServiceRequest.Topic
	TopicSchedules       = aggregates.Schedule.Topic
	TopicPlans           = aggregates.Plan.Topic
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
// The transaction pipelines its statements on one connection: BEGIN goes
// with fn's first read, and the appends, the publications and COMMIT go
// together, so creating an order costs two round trips.
func (t *Transactor) Run(ctx context.Context, meta event.Meta, fn func(ctx context.Context, s command.Session) error) (command.Outcome, error) {
	var out command.Outcome
	ctx, span := t.store.span(ctx, "hearth.transaction")
	err := database.WithConn(ctx, t.store.db.DB, func(conn *pgx.Conn) error {
		s := &session{store: t.store, tx: &pipe{conn: conn}, meta: meta, byID: map[string]*tracked{}}
		if err := fn(ctx, s); err != nil {
			return err // WithConn rolls the transaction back
		}
		var err error
		if i := command.IdempotentOf(ctx); i != nil {
			out, err = s.commitAnswered(ctx, i)
		} else {
			out, err = s.commit(ctx)
		}
		return err
	})
	if span.IsRecording() {
		span.SetAttributes(attribute.String("hearth.merchant_id", meta.MerchantID), attribute.Int64("hearth.position", out.Position))
	}
	tracing.End(span, err)
	if err != nil {
		return command.Outcome{}, err
	}
	return out, nil
}

type commitCheckKey struct{}

// WithCommitCheck returns a context in which a session's transaction runs
// stmt (its values inlined) first in its commit's batch, before the
// appends and COMMIT; when it fails, nothing commits. A leader's fencing
// check goes here (the visit generator's): it reads its term row FOR
// SHARE, a row lock, which takes the transaction's id. Taken right after
// BEGIN, that id would be older than a change to an order or schedule
// committed before the transaction loads it, and the append after that
// version would fail as a conflict (queueAppend's predecessor check): a
// re-plan or a cancellation left for a later round whenever a dispatcher
// touched the order meanwhile. Checked with the commit, the term is as
// safe (the row is locked until COMMIT, so a new term's increment waits
// for this transaction, or this transaction reads the new term and
// fails), and the id is taken by the transaction's first write (the
// generator's bookings and appends come after its loads). No deadlock
// with a new term's increment: it takes the term row alone, and waits only
// for the transactions already holding their share, which then need no
// lock of its. The lease (the transaction's idle timeout) can still be set
// right after BEGIN (database.WithBegin): set_config takes no id.
func WithCommitCheck(ctx context.Context, stmt string) context.Context {
	return context.WithValue(ctx, commitCheckKey{}, stmt)
}

// commitCheck is WithCommitCheck's statement in ctx ("" when none).
func commitCheck(ctx context.Context) string {
	stmt, _ := ctx.Value(commitCheckKey{}).(string)
	return stmt
}

// pipe is a transaction on one connection whose statements go in batches,
// one round trip each. BEGIN goes with the first batch sent.
type pipe struct {
	conn  *pgx.Conn
	begun bool
}

// send runs b (preceded by BEGIN when it is the transaction's first) and
// returns the first error of its statements; the statements after a failed
// one do not run. (pgx then forgets the prepared statements of b: keep
// expected outcomes, such as a missing row, out of the errors.)
func (p *pipe) send(ctx context.Context, b *pgx.Batch) error {
	first := !p.begun
	if first {
		begin := []*pgx.QueuedQuery{{SQL: "BEGIN"}}
		// A statement of the caller's right after BEGIN (database.WithBegin):
		// the visit generator's lease, the idle timeout of its transactions.
		if stmt := database.BeginStatement(ctx); stmt != "" {
			begin = append(begin, &pgx.QueuedQuery{SQL: stmt, Fn: func(br pgx.BatchResults) error {
				_, err := br.Exec()
				return err
			}})
		}
		// The request's key, checked before anything the transaction
		// reads or writes (access.KeyCheck).
		if check := access.PendingKeyCheck(ctx); check != nil {
			begin = append(begin,
				&pgx.QueuedQuery{SQL: check.LockSQL, Arguments: check.LockArgs, Fn: lockKey},
				&pgx.QueuedQuery{SQL: check.SQL, Arguments: check.Args, Fn: checkKey(check)})
		}
		b.QueuedQueries = slices.Insert(b.QueuedQueries, 0, begin...)
	}
	err := p.conn.SendBatch(ctx, b).Close()
	if first { // begun only if BEGIN ran: a batch can fail before it does
		p.begun = p.conn.PgConn().TxStatus() != 'I'
	}
	return err
}

// lockKey reads the result of the lock a key's check takes first.
func lockKey(br pgx.BatchResults) error {
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("lock the API key: %w", err)
	}
	return nil
}

// checkKey reads the result of a key's check (access.KeyCheck.Settle).
func checkKey(check *access.KeyCheck) func(pgx.BatchResults) error {
	return func(br pgx.BatchResults) error {
		_, err := br.Exec()
		return check.Settle(err)
	}
}

// queryRow runs one statement and scans its single row with scan, which
// sees pgx.ErrNoRows when there is none.
func (p *pipe) queryRow(ctx context.Context, scan func(pgx.Row) error, query string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(query, args...).QueryRow(scan)
	return p.send(ctx, b)
}

// maybeRow scans a row that may not exist into dest; found says whether it
// did.
func maybeRow(found *bool, dest ...any) func(pgx.Row) error {
	return func(row pgx.Row) error {
		err := row.Scan(dest...)
		*found = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	}
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
	tx      *pipe
	meta    event.Meta
	byID    map[string]*tracked
	ordered []*tracked
	names   map[string]string // reference records read, for the outcome
	require []string          // customers RequireCustomer named
	locked  []string          // customers checked (and locked) for this write: vault.CustomerWriteSQL
	// erased are the customers found erased whose aggregates this write
	// changes with events that carry no personal text (spared): sealed by
	// vault.SealErased.
	erased []string
}

func (s *session) track(t *tracked) {
	s.byID[t.agg.ID()] = t
	s.ordered = append(s.ordered, t)
}

// load loads and tracks one aggregate; loading it again returns the same one.
func load[A aggregate](ctx context.Context, s *session, k aggregates.Kind[A], id string) (A, error) {
	st := k.Facts
	var zero A
	if t, ok := s.byID[id]; ok {
		a, ok := t.agg.(A)
		if !ok || t.stream.Type != st.Type {
			return zero, apperr.ErrNotFound
		}
		return a, nil
	}
	recs, pos, err := s.store.load(ctx, s.tx, st, s.meta.MerchantID, id)
	if err != nil {
		return zero, err
	}
	events := make([]event.Event, len(recs))
	for i, r := range recs {
		events[i] = r.Event
	}
	a, err := k.Rehydrate(events)
	if err != nil {
		return zero, fmt.Errorf("%s %s: %w", st.Type, id, err)
	}
	s.track(&tracked{stream: st, agg: a, loaded: recs, pos: pos})
	return a, nil
}

func (s *session) Order(ctx context.Context, id string) (*order.Order, error) {
	return load(ctx, s, aggregates.Order, id)
}

func (s *session) ServiceRequest(ctx context.Context, id string) (*servicerequest.Request, error) {
	return load(ctx, s, aggregates.ServiceRequest, id)
}

func (s *session) Schedule(ctx context.Context, id string) (*schedule.Schedule, error) {
	return load(ctx, s, aggregates.Schedule, id)
}

func (s *session) ServicePlan(ctx context.Context, id string) (*plan.Plan, error) {
	return load(ctx, s, aggregates.Plan, id)
}

func (s *session) AddServicePlan(p *plan.Plan) { s.track(&tracked{stream: PlanStream, agg: p}) }

func (s *session) MerchantTimeZone(ctx context.Context) (string, error) {
	var tz string
	var found bool
	if err := s.tx.queryRow(ctx, maybeRow(&found, &tz), `SELECT time_zone FROM merchants WHERE id = $1`, s.meta.MerchantID); err != nil {
		return "", fmt.Errorf("read merchant time zone: %w", err)
	}
	if !found {
		return "", apperr.ErrNotFound
	}
	return tz, nil
}

func (s *session) AddOrder(o *order.Order) { s.track(&tracked{stream: OrderStream, agg: o}) }
func (s *session) AddServiceRequest(r *servicerequest.Request) {
	s.track(&tracked{stream: ServiceRequestStream, agg: r})
}
func (s *session) AddSchedule(sch *schedule.Schedule) {
	s.track(&tracked{stream: ScheduleStream, agg: sch})
}

// commit appends every tracked aggregate's changes, in the order the use
// case touched them, and commits, all in one batch.
func (s *session) commit(ctx context.Context) (_ command.Outcome, err error) {
	ctx, span := s.store.span(ctx, "hearth.append")
	defer func() { tracing.End(span, err) }()
	b, appends, err := s.queueAppends(ctx)
	if err != nil {
		return command.Outcome{}, err
	}
	if b.Len() > 0 || s.tx.begun { // else nothing read, nothing written: no transaction
		queueCommit(b)
		if err := s.tx.send(ctx, b); err != nil {
			return command.Outcome{}, err
		}
	}
	return s.outcome(appends), nil
}

// commitAnswered is commit for an idempotent attempt: the appends go first,
// since the answer shows their positions; then the answer i renders from
// the outcome is stored with COMMIT, so the events and the answer commit
// together or not at all. One round trip more than commit.
func (s *session) commitAnswered(ctx context.Context, i *command.Idempotent) (_ command.Outcome, err error) {
	ctx, span := s.store.span(ctx, "hearth.append")
	defer func() { tracing.End(span, err) }()
	b, appends, err := s.queueAppends(ctx)
	if err != nil {
		return command.Outcome{}, err
	}
	if b.Len() > 0 {
		if err := s.tx.send(ctx, b); err != nil {
			return command.Outcome{}, err
		}
	}
	out := s.outcome(appends)
	answer, err := i.Render(ctx, out)
	if err != nil {
		return command.Outcome{}, fmt.Errorf("render idempotent answer: %w", err)
	}
	args, err := idempotency.CompleteArgs(i, answer)
	if err != nil {
		return command.Outcome{}, err
	}
	b = &pgx.Batch{}
	b.Queue(idempotency.CompleteSQL, args...).Exec(func(pgconn.CommandTag) error { return nil })
	queueCommit(b)
	if err := s.tx.send(ctx, b); err != nil {
		return command.Outcome{}, idempotency.TakenOver(err)
	}
	i.Sealed(answer)
	return out, nil
}

// queueAppends queues the appends of every tracked aggregate, their
// personal fields sealed for their customers.
func (s *session) queueAppends(ctx context.Context) (*pgx.Batch, []*appended, error) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		n := 0
		for _, t := range s.ordered {
			n += len(t.agg.Changes())
		}
		span.SetAttributes(attribute.Int("hearth.events", n))
	}
	subjects, err := s.subjects(ctx)
	if err != nil {
		return nil, nil, err
	}
	b := &pgx.Batch{}
	s.queueRequired(b)
	s.queueSubjectLocks(b, subjects, nil)
	appends := make([]*appended, len(s.ordered))
	for i, t := range s.ordered {
		a, err := s.store.queueAppend(ctx, b, t.stream, s.meta, t.agg.ID(), subjects[i], slices.Contains(s.erased, subjects[i]),
			t.agg.Version(), t.agg.Changes())
		if err != nil {
			return nil, nil, err
		}
		appends[i] = a
	}
	if stmt := commitCheck(ctx); stmt != "" && (b.Len() > 0 || s.tx.begun) {
		// First in the batch: a refused check stops the appends from
		// running at all.
		b.QueuedQueries = slices.Insert(b.QueuedQueries, 0, &pgx.QueuedQuery{SQL: stmt, Fn: func(br pgx.BatchResults) error {
			_, err := br.Exec()
			return err
		}})
	}
	return b, appends, nil
}

// queueSubjectLocks queues, before the appends, the check of each subject
// whose data key seals them (vault.CustomerWriteSQL) that this
// transaction has not checked yet (RequireCustomer's check is the same):
// an erasure that began first is waited for, and this write then fails as
// any write for an erased subject does; one that begins later waits for
// this write, and sees what it wrote. A subject in spared takes the lock
// alone (vault.WriteLockSQL): the write says nothing about them, so their
// erasure does not refuse it.
func (s *session) queueSubjectLocks(b *pgx.Batch, subjects, spared []string) {
	for _, subject := range subjects {
		if subject == "" || slices.Contains(s.locked, subject) {
			continue
		}
		s.locked = append(s.locked, subject)
		if slices.Contains(spared, subject) {
			b.Queue(vault.WriteLockSQL, subject).Fn = func(br pgx.BatchResults) error {
				if _, err := br.Exec(); err != nil {
					return fmt.Errorf("lock customer %s: %w", subject, err)
				}
				return nil
			}
			continue
		}
		b.Queue(vault.CustomerWriteSQL, subject, s.meta.MerchantID).Fn = func(br pgx.BatchResults) error {
			_, err := br.Exec()
			return customerWriteError(subject, err)
		}
	}
}

// spared reports whether the write's changes for subject say nothing about
// them, so that it may commit after their erasure: every aggregate that
// seals for subject was theirs before this write (not one created for them
// nor moved to them, which would start new work for an erased customer),
// and each of its new events has its personal fields empty (an order that
// loses its staff member when its schedule is cancelled, a payment without
// a note) or closes the aggregate (Facts.Closing: a cancellation, whose
// reason is required). Otherwise an erased customer's booking could never
// be freed, their order cancelled nor their payment recorded. Whatever
// text is written is sealed under a key never stored: it reads as erased
// at once.
func (s *session) spared(subjects []string, subject string) (bool, error) {
	for i, t := range s.ordered {
		if subjects[i] != subject {
			continue
		}
		if t.agg.Version() == 0 || !heldBefore(t, subject) {
			return false, nil
		}
		for _, e := range t.agg.Changes() {
			fields := t.stream.Personal[e.EventType()]
			if len(fields) == 0 || t.stream.Closing[e.EventType()] {
				continue
			}
			data, err := json.Marshal(e)
			if err != nil {
				return false, fmt.Errorf("marshal %s: %w", e.EventType(), err)
			}
			if blank, err := vault.Blank(data, fields); err != nil || !blank {
				return false, err
			}
		}
	}
	return true, nil
}

// heldBefore reports whether a loaded aggregate was subject's before the
// write: an order's customer can change (OrderDetailsUpdated), a service
// request's and a schedule's cannot.
func heldBefore(t *tracked, subject string) bool {
	if _, ok := t.agg.(*order.Order); !ok {
		return true
	}
	customer := ""
	for _, r := range t.loaded {
		switch e := r.Event.(type) {
		case order.Created:
			customer = e.CustomerID
		case order.DetailsUpdated:
			customer = e.CustomerID
		}
	}
	return customer == subject
}

// customerWriteError is what a refusal of vault.CustomerWriteSQL for
// customer means to the command.
func customerWriteError(customer string, err error) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == vault.CustomerMissing:
		return command.NoCustomer(customer)
	case errors.As(err, &pgErr) && pgErr.Code == vault.CustomerErased:
		return sealError(&vault.ErasedError{Subject: customer})
	case err != nil:
		return fmt.Errorf("check customer: %w", err)
	}
	return nil
}

// subjects returns, by tracked aggregate, the customer whose data key seals
// its new events' personal fields ("" when it appends none), and has the
// vault adopt the keys it does not hold: one round trip, in the command's
// transaction, for the customers new to this instance. A customer who was
// erased gets no key: the command fails with a conflict, unless it writes
// nothing about them (spared), when its events are sealed under a key never
// stored (session.erased).
func (s *session) subjects(ctx context.Context) ([]string, error) {
	out := make([]string, len(s.ordered))
	v := s.store.vault
	if v == nil || s.store.clear {
		return out, nil
	}
	var missing []string
	for i, t := range s.ordered {
		if !slices.ContainsFunc(t.agg.Changes(), func(e event.Event) bool { return len(t.stream.Personal[e.EventType()]) > 0 }) {
			continue
		}
		subject, err := s.subjectOf(ctx, t)
		if err != nil {
			return nil, err
		}
		out[i] = subject
		if !v.Cached(subject) && !slices.Contains(missing, subject) {
			missing = append(missing, subject)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	var spared []string
	for _, subject := range missing {
		ok, err := s.spared(out, subject)
		if err != nil {
			return nil, err
		}
		if ok {
			spared = append(spared, subject)
		}
	}
	b := &pgx.Batch{}
	// The customer checks go first: a customer the merchant does not have
	// fails the batch before a data key is made for them. They take the
	// subjects' locks too, before the data keys' rows, in the order the
	// erasure takes them (the lock, then the keys).
	s.queueRequired(b)
	s.queueSubjectLocks(b, missing, spared)
	for _, subject := range missing {
		sealed, err := v.NewKey(subject)
		if err != nil {
			return nil, err
		}
		b.Queue(vault.KeySQL, subject, s.meta.MerchantID, event.SubjectCustomer, sealed).Query(func(rows pgx.Rows) error {
			found := false
			for rows.Next() {
				var stored []byte
				if err := rows.Scan(&stored); err != nil {
					return err
				}
				if err := v.Adopt(subject, stored); err != nil {
					return err
				}
				found = true
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if !found {
				if slices.Contains(spared, subject) {
					s.erased = append(s.erased, subject)
					return nil
				}
				return sealError(&vault.ErasedError{Subject: subject})
			}
			return nil
		})
	}
	if err := s.tx.send(ctx, b); err != nil {
		return nil, fmt.Errorf("data keys: %w", err)
	}
	return out, nil
}

// subjectOf is the customer of a tracked aggregate. A schedule created
// before schedules recorded it names its order's.
func (s *session) subjectOf(ctx context.Context, t *tracked) (string, error) {
	switch a := t.agg.(type) {
	case *order.Order:
		return a.CustomerID(), nil
	case *servicerequest.Request:
		return a.CustomerID(), nil
	case *schedule.Schedule:
		if a.CustomerID() != "" {
			return a.CustomerID(), nil
		}
		if o, ok := s.byID[a.OrderID()]; ok {
			if o, ok := o.agg.(*order.Order); ok {
				return o.CustomerID(), nil
			}
		}
		recs, _, err := s.store.load(ctx, s.tx, OrderStream, s.meta.MerchantID, a.OrderID())
		if err != nil {
			return "", fmt.Errorf("the customer of schedule %s: %w", a.ID(), err)
		}
		events := make([]event.Event, len(recs))
		for i, r := range recs {
			events[i] = r.Event
		}
		o, err := order.Rehydrate(events)
		if err != nil {
			return "", err
		}
		return o.CustomerID(), nil
	}
	return "", fmt.Errorf("%s %s: no data subject known for this aggregate type", t.stream.Type, t.agg.ID())
}

func queueCommit(b *pgx.Batch) {
	b.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" { // a transaction already failed ends in ROLLBACK
			return fmt.Errorf("commit: the transaction was rolled back (%s)", tag)
		}
		return nil
	})
}

// outcome is what the session wrote, once its appends have run.
func (s *session) outcome(appends []*appended) command.Outcome {
	out := command.Outcome{Streams: make(map[string]command.Written, len(s.ordered)), Names: s.names}
	for i, t := range s.ordered {
		a := appends[i]
		pos := max(a.position, t.pos)
		out.Streams[t.agg.ID()] = command.Written{Stream: append(t.loaded, a.recs...), Appended: len(a.recs), Position: pos}
		out.Position = max(out.Position, pos)
	}
	return out
}

func (s *session) LiveSchedule(ctx context.Context, orderID string) (*schedule.Schedule, bool, error) {
	var id string
	var found bool
	err := s.tx.queryRow(ctx, maybeRow(&found, &id), `SELECT schedule_id FROM bookings WHERE order_id = $1 AND merchant_id = $2 AND live`, orderID, s.meta.MerchantID)
	if err != nil {
		return nil, false, fmt.Errorf("find live schedule of order %s: %w", orderID, err)
	}
	if !found {
		return nil, false, nil
	}
	sch, err := s.Schedule(ctx, id)
	return sch, err == nil, err
}

// Book writes the schedule's booking. The insert runs under a savepoint so
// that, when the exclusion constraint refuses it, the transaction can still
// name the schedule it clashed with.
func (s *session) Book(ctx context.Context, sch *schedule.Schedule) error {
	if sch.Version() > 0 && len(sch.Changes()) == 0 {
		// A stored schedule the command leaves as it is has its booking
		// already. Writing it again from what the command read could
		// bring back a booking that a command committed since released
		// (the schedule cancelled or done), and this command, appending
		// nothing to the schedule, would not conflict with that one.
		return nil
	}
	b := &pgx.Batch{}
	if !sch.Status().Live() {
		b.Queue(`UPDATE bookings SET live = false WHERE schedule_id = $1`, sch.ID())
		if err := s.tx.send(ctx, b); err != nil {
			return fmt.Errorf("release booking of schedule %s: %w", sch.ID(), err)
		}
		return nil
	}
	w := sch.Window()
	b.Queue(`SAVEPOINT book`)
	b.Queue(`
		INSERT INTO bookings (schedule_id, merchant_id, order_id, staff_id, period, live)
		VALUES ($1, $2, $3, $4, tstzrange($5, $6, '[)'), true)
		ON CONFLICT (schedule_id) DO UPDATE SET staff_id = excluded.staff_id, period = excluded.period, live = true`,
		sch.ID(), s.meta.MerchantID, sch.OrderID(), w.StaffID, w.StartAt, w.EndAt)
	b.Queue(`RELEASE SAVEPOINT book`)
	err := s.tx.send(ctx, b)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pgErr) && pgErr.ConstraintName == "bookings_no_double_booking":
		if rbErr := s.unbook(ctx); rbErr != nil {
			return errors.Join(err, rbErr)
		}
		return s.clash(ctx, sch)
	case errors.As(err, &pgErr) && pgErr.ConstraintName == "bookings_one_live_per_order":
		// Back to the savepoint too: a use case may go on after a
		// conflict (the visit generator leaves the visit unassigned).
		if rbErr := s.unbook(ctx); rbErr != nil {
			return errors.Join(err, rbErr)
		}
		return &apperr.ConflictError{Detail: fmt.Sprintf("order %s already has a live schedule", sch.OrderID())}
	default:
		return fmt.Errorf("book schedule %s: %w", sch.ID(), err)
	}
}

// unbook rolls a refused booking back to its savepoint: the transaction
// goes on.
func (s *session) unbook(ctx context.Context) error {
	b := &pgx.Batch{}
	b.Queue(`ROLLBACK TO SAVEPOINT book`)
	return s.tx.send(ctx, b)
}

// clash names the live booking that overlaps sch.
func (s *session) clash(ctx context.Context, sch *schedule.Schedule) error {
	w := sch.Window()
	var other string
	var start, end time.Time
	err := s.tx.queryRow(ctx, func(row pgx.Row) error { return row.Scan(&other, &start, &end) }, `
		SELECT schedule_id, lower(period), upper(period) FROM bookings
		WHERE staff_id = $1 AND live AND schedule_id <> $2 AND period && tstzrange($3, $4, '[)')
		LIMIT 1`, w.StaffID, sch.ID(), w.StartAt, w.EndAt)
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

func (s *session) Customer(ctx context.Context, id string) (name string, found bool, err error) {
	err = s.tx.queryRow(ctx, maybeRow(&found, &name), `SELECT name FROM customers WHERE id = $1 AND merchant_id = $2`, id, s.meta.MerchantID)
	if err != nil {
		return "", false, fmt.Errorf("check customer: %w", err)
	}
	if found {
		if s.names == nil {
			s.names = map[string]string{}
		}
		s.names[id] = name
	}
	return name, found, nil
}

func (s *session) RequireCustomer(id string) { s.require = append(s.require, id) }

// queueRequired queues the checks RequireCustomer asked for, not queued
// yet, into b, the commit's first batch: the checks and the writes share a
// round trip. A missing customer is rare (a client's mistake), so the
// error it takes, which also has pgx forget b's prepared statements, costs
// little.
func (s *session) queueRequired(b *pgx.Batch) {
	required := s.require
	s.require = nil
	for _, id := range required {
		// The write's check of the customer (vault.CustomerWriteSQL): it
		// fails when the merchant has no such customer, or when it was
		// erased; an error is the only way a statement of a pipelined
		// batch can stop the statements after it (the appends, COMMIT)
		// from running, and it rolls the transaction back.
		if !slices.Contains(s.locked, id) {
			s.locked = append(s.locked, id)
		}
		b.Queue(vault.CustomerWriteSQL, id, s.meta.MerchantID).QueryRow(func(row pgx.Row) error {
			var name string
			if err := customerWriteError(id, row.Scan(&name)); err != nil {
				return err
			}
			if s.names == nil {
				s.names = map[string]string{}
			}
			s.names[id] = name
			return nil
		})
	}
}

func (s *session) CustomerErased(ctx context.Context, id string) (bool, error) {
	var erased bool
	err := s.tx.queryRow(ctx, maybeRow(new(bool), &erased), `SELECT erased_at IS NOT NULL FROM customers WHERE id = $1 AND merchant_id = $2`, id, s.meta.MerchantID)
	if err != nil {
		return false, fmt.Errorf("check customer erased: %w", err)
	}
	return erased, nil
}

// StaffActive reads the staff member's row FOR SHARE, held until the
// command commits: a change of the row (PATCH's active = false, the staff
// member's erasure) that begins after this check waits for the command, and
// one committed before it is what the check reads (Read Committed reads a
// locked row's latest version). Without the lock, an assignment could check
// a staff member active, see them deactivated or erased meanwhile, and
// still commit a booking for them after that change had answered.
func (s *session) StaffActive(ctx context.Context, id string) (exists, active bool, err error) {
	err = s.tx.queryRow(ctx, maybeRow(&exists, &active), `SELECT active FROM staff WHERE id = $1 AND merchant_id = $2 FOR SHARE`, id, s.meta.MerchantID)
	if err != nil {
		return false, false, fmt.Errorf("check staff: %w", err)
	}
	return exists, active, nil
}

func (s *session) StaffHours(ctx context.Context, id string) (availability.WorkingHours, *time.Location, bool, error) {
	var set bool
	var week, exceptions, tz string
	// The merchant's zone comes with the hours, in the same round trip:
	// the hours are read in it, as availability reads them.
	err := s.tx.queryRow(ctx, maybeRow(&set, &week, &exceptions, &tz), `SELECT h.week::text, h.exceptions::text, m.time_zone
		FROM staff_hours h JOIN merchants m ON m.id = h.merchant_id
		WHERE h.staff_id = $1 AND h.merchant_id = $2`, id, s.meta.MerchantID)
	if err != nil || !set {
		if err != nil {
			err = fmt.Errorf("read working hours of %s: %w", id, err)
		}
		return availability.WorkingHours{}, nil, false, err
	}
	var w availability.Week
	var ex []availability.Exception
	if err := errors.Join(json.Unmarshal([]byte(week), &w), json.Unmarshal([]byte(exceptions), &ex)); err != nil {
		return availability.WorkingHours{}, nil, false, fmt.Errorf("working hours of %s: %w", id, err)
	}
	h, err := availability.NewWorkingHours(w, ex)
	if err != nil {
		return availability.WorkingHours{}, nil, false, fmt.Errorf("working hours of %s: %w", id, err)
	}
	// StoredZone: a name an instance older than migration eventstore/026
	// may still write is read as the migration rewrites it, not refused.
	loc, err := civil.StoredZone(tz)
	if err != nil {
		return availability.WorkingHours{}, nil, false, fmt.Errorf("load time zone of working hours of %s: %w", id, err)
	}
	return h, loc, true, nil
}

func (s *session) CatalogItem(ctx context.Context, id string) (price int64, active, found bool, err error) {
	err = s.tx.queryRow(ctx, maybeRow(&found, &price, &active), `SELECT base_price_cents, active FROM catalog_items WHERE id = $1 AND merchant_id = $2`, id, s.meta.MerchantID)
	if err != nil {
		return 0, false, false, fmt.Errorf("check catalog item: %w", err)
	}
	return price, active, found, nil
}

func (s *session) PlanVisits(ctx context.Context, planID string) ([]command.PlanVisit, error) {
	var out []command.PlanVisit
	b := &pgx.Batch{}
	b.Queue(`SELECT visit_key, plan_id, order_id, start_at, end_at, coalesce(staff_id::text, ''), price_cents, unassigned_reason, cancelled,
			withdrawn, generation, coalesce(planned_for::text, '')
		FROM plan_visits WHERE plan_id = $1 AND merchant_id = $2 ORDER BY start_at, visit_key`, planID, s.meta.MerchantID).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var v command.PlanVisit
			if err := rows.Scan(&v.Key, &v.PlanID, &v.OrderID, &v.StartAt, &v.EndAt, &v.StaffID, &v.PriceCents, &v.UnassignedReason, &v.Cancelled,
				&v.Withdrawn, &v.Generation, &v.PlannedFor); err != nil {
				return err
			}
			v.StartAt, v.EndAt, v.Existing = v.StartAt.UTC(), v.EndAt.UTC(), true
			out = append(out, v)
		}
		return rows.Err()
	})
	if err := s.tx.send(ctx, b); err != nil {
		return nil, fmt.Errorf("read visits of plan %s: %w", planID, err)
	}
	return out, nil
}

// SaveVisit inserts a new visit's ledger row (a second one of the key is a
// conflict: another attempt created the visit), or updates an existing one.
func (s *session) SaveVisit(ctx context.Context, v command.PlanVisit) error {
	b := &pgx.Batch{}
	var staff, plannedFor *string
	if v.StaffID != "" {
		staff = &v.StaffID
	}
	if v.PlannedFor != "" {
		plannedFor = &v.PlannedFor
	}
	if v.Existing {
		b.Queue(`UPDATE plan_visits SET start_at = $3, end_at = $4, staff_id = $5, price_cents = $6, unassigned_reason = $7,
			cancelled = $8, withdrawn = $9, generation = $10, order_id = $11, planned_for = $12, updated_at = now()
			WHERE visit_key = $1 AND merchant_id = $2`,
			v.Key, s.meta.MerchantID, v.StartAt, v.EndAt, staff, v.PriceCents, v.UnassignedReason, v.Cancelled, v.Withdrawn, v.Generation, v.OrderID,
			plannedFor)
	} else {
		b.Queue(`INSERT INTO plan_visits (visit_key, merchant_id, plan_id, order_id, start_at, end_at, staff_id, price_cents, unassigned_reason,
			planned_for)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			v.Key, s.meta.MerchantID, v.PlanID, v.OrderID, v.StartAt, v.EndAt, staff, v.PriceCents, v.UnassignedReason, plannedFor)
	}
	err := s.tx.send(ctx, b)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return &apperr.ConflictError{Detail: fmt.Sprintf("visit %s has an order already", v.Key)}
	}
	if err != nil {
		return fmt.Errorf("save visit %s: %w", v.Key, err)
	}
	return nil
}
