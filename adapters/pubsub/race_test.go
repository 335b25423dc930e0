package pubsub_test

import (
	"context"
	"crypto/sha256"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/internal/pubsubtest"
	"hearth/app/access"
	"hearth/app/command"
	"hearth/app/ops"
	"hearth/domain/apperr"
	"hearth/domain/civil"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/plan"
	"hearth/domain/reference"
	"hearth/domain/schedule"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
	"hearth/internal/refdata"
)

// A worker moves their schedule into service while the dispatcher edits
// the order: the edit commits before the status change reads the order.
// Nothing the status change read changed after it read it, so it succeeds,
// and the order (at the edit's amount) follows the schedule into service.
func TestScheduleStatusChangeSucceedsWhenItsOrderChangedBeforeItReadIt(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	ctx := context.Background()
	id, scheduleID := f.AssignedOrder(t)

	var edit error
	hooked := &pubsubtest.BeforeOrderLoad{Transactor: f.Tx, Only: id, Hook: func() {
		_, edit = f.Update(ctx, id, nil, func(o *order.Order) error {
			return o.UpdateDetails(order.Details{CustomerID: f.CustomerID, AmountCents: 700})
		})
	}}
	schedules, err := command.NewScheduleHandlers(hooked)
	require.NoError(t, err)
	_, err = schedules.ChangeStatus(ctx, command.ChangeScheduleStatus{Meta: f.Meta(), ScheduleID: scheduleID, Status: "in_service"})
	require.NoError(t, edit, "the order's edit commits")
	require.NoError(t, err, "the status change read the order after the edit committed: nothing raced it")

	stream := f.Stream(t, id)
	last := stream[len(stream)-1]
	require.Equal(t, "OrderStatusChanged", last.Type, "the order follows the schedule")
	require.Equal(t, "OrderDetailsUpdated", stream[len(stream)-2].Type)
}

// beforeBook is a Transactor whose sessions run hook (once) before they
// write a booking: another command commits there, as it may between two
// statements of a use case.
type beforeBook struct {
	command.Transactor
	once sync.Once
	hook func()
}

func (b *beforeBook) Run(ctx context.Context, meta event.Meta, fn func(ctx context.Context, s command.Session) error) (command.Outcome, error) {
	return b.Transactor.Run(ctx, meta, func(ctx context.Context, s command.Session) error {
		return fn(ctx, &bookHookedSession{Session: s, b: b})
	})
}

type bookHookedSession struct {
	command.Session
	b *beforeBook
}

func (s *bookHookedSession) Book(ctx context.Context, sch *schedule.Schedule) error {
	s.b.once.Do(s.b.hook)
	return s.Session.Book(ctx, sch)
}

// A command that changes nothing (an assignment sent again, an order put
// in service again) races one that ends the schedule (the order's cancel,
// the schedule done): the first read the schedule live before the second
// committed. The schedule's booking stays released: a staff member's time
// is never held by a schedule that is no longer live, and the order's and
// the schedule's streams are untouched by the command that changed
// nothing.
func TestACommandThatChangesNothingNeverBooksAScheduleEndedMeanwhile(t *testing.T) {
	t.Parallel()
	type race struct {
		inService bool // the order is in service before the race
		// noop changes nothing; end ends the schedule (run inside noop).
		noop func(f flows, o command.OrderHandlers, orderID string) error
		end  func(t *testing.T, f flows, orderID, scheduleID string) error
	}
	for name, r := range map[string]race{
		"assignment sent again, order cancelled": {
			noop: func(f flows, o command.OrderHandlers, orderID string) error {
				_, err := o.Assign(context.Background(), command.AssignOrder{OrderTarget: command.OrderTarget{Meta: f.Meta(), OrderID: orderID},
					StaffID: f.staffID, StartAt: at(9, 0), EndAt: at(10, 0), DispatchNote: "ring twice"})
				return err
			},
			end: func(_ *testing.T, f flows, orderID, _ string) error {
				_, err := f.OrderCmds.Cancel(context.Background(), command.CancelOrder{
					OrderTarget: command.OrderTarget{Meta: f.Meta(), OrderID: orderID}, Reason: "customer moved away"})
				return err
			},
		},
		"order put in service again, schedule done": {
			inService: true,
			noop: func(f flows, o command.OrderHandlers, orderID string) error {
				_, err := o.ChangeStatus(context.Background(), command.ChangeOrderStatus{
					OrderTarget: command.OrderTarget{Meta: f.Meta(), OrderID: orderID}, Status: "in_service"})
				return err
			},
			end: func(t *testing.T, f flows, _, scheduleID string) error {
				return f.scheduleStatus(t, scheduleID, "done")
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setupFlows(t, pgtest.NewDB(t))
			orderID := f.CreateOrder(t)
			require.NoError(t, f.assign(context.Background(), orderID, f.staffID, at(9, 0), at(10, 0)))
			scheduleID := f.liveSchedule(t, orderID)
			if r.inService {
				require.NoError(t, f.scheduleStatus(t, scheduleID, "in_service"))
			}

			var ended error
			hooked := &beforeBook{Transactor: f.Tx, hook: func() { ended = r.end(t, f, orderID, scheduleID) }}
			o, err := command.NewOrderHandlers(hooked)
			require.NoError(t, err)
			err = r.noop(f, o, orderID)
			require.NoError(t, ended, "the schedule ends")
			if err != nil {
				var conflict *apperr.ConflictError
				require.ErrorAs(t, err, &conflict, "the command that changed nothing may only fail as a conflict")
			}
			require.Empty(t, f.liveSchedule(t, orderID), "the ended schedule holds no booking")
			require.Empty(t, f.liveBookings(t), "the staff member's time is free")
			other := f.CreateOrder(t)
			require.NoError(t, f.assign(context.Background(), other, f.staffID, at(9, 0), at(10, 0)), "another order can take the window")
		})
	}
}

// beforeStaffCheck is a Transactor whose sessions run hook (once) before
// they check a staff member.
type beforeStaffCheck struct {
	command.Transactor
	once sync.Once
	hook func()
}

func (b *beforeStaffCheck) Run(ctx context.Context, meta event.Meta, fn func(ctx context.Context, s command.Session) error) (command.Outcome, error) {
	return b.Transactor.Run(ctx, meta, func(ctx context.Context, s command.Session) error {
		return fn(ctx, &staffHookedSession{Session: s, b: b})
	})
}

type staffHookedSession struct {
	command.Session
	b *beforeStaffCheck
}

func (s *staffHookedSession) StaffActive(ctx context.Context, id string) (exists, active bool, err error) {
	s.b.once.Do(s.b.hook)
	return s.Session.StaffActive(ctx, id)
}

// A service plan is created while its customer is erased: the erasure
// commits after the plan's check that the customer was not erased, before
// the plan commits. The plan is refused as a conflict, or the erasure ends
// it: never a live plan of an erased customer (the erasure's promise).
func TestAPlanCreatedWhileItsCustomerIsErasedIsRefusedOrEnded(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	ctx := context.Background()
	staff := uuid.New()
	_, err := f.ES.DB.Exec(`INSERT INTO staff (id, merchant_id, name) VALUES ($1, $2, 'Wanda')`, staff, f.MerchantID)
	require.NoError(t, err)
	item := uuid.New()
	_, err = f.ES.DB.Exec(`INSERT INTO catalog_items (id, merchant_id, name, base_price_cents) VALUES ($1, $2, 'Weekly clean', 4500)`,
		item, f.MerchantID)
	require.NoError(t, err)

	var erased error
	hooked := &beforeStaffCheck{Transactor: f.Tx, hook: func() {
		req := ops.ErasureRequest{By: "test", MerchantID: f.MerchantID, SubjectType: event.SubjectCustomer, SubjectID: f.CustomerID,
			Confirm: f.CustomerID, CorrelationID: uuid.New()}
		_, erased = f.Store.EraseSubject(ctx, req, func(ops.Erasure) ops.AuditEntry {
			return ops.AuditEntry{Actor: "test", Action: ops.ActionCustomerErase, Target: "customer/" + f.CustomerID}
		})
	}}
	plans, err := command.NewPlanHandlers(hooked)
	require.NoError(t, err)
	w, err := plans.Create(ctx, command.CreatePlan{Meta: f.Meta(), CustomerID: f.CustomerID, CatalogItemID: item, StaffID: staff,
		Window:     plan.Window{Start: civil.At(9, 0), End: civil.At(11, 0)},
		Recurrence: plan.Recurrence{Frequency: plan.Weekly, Interval: 1, Start: civil.DateOf(time.Now(), time.UTC).AddDays(1), Count: 4}})
	require.NoError(t, erased, "the erasure")
	if err != nil {
		var conflict *apperr.ConflictError
		require.ErrorAs(t, err, &conflict, "the plan may only be refused as its customer erased")
		return
	}
	stream, err := f.Store.Read(ctx, pubsub.PlanStream, f.MerchantID, w.Stream[0].StreamID)
	require.NoError(t, err)
	require.Equal(t, plan.Ended{}.EventType(), stream[len(stream)-1].Type, "a plan of an erased customer is ended")
}

// staffMadeInactive are the two ways a staff member stops working: made
// inactive (PATCH /v1/staff/{id}) and erased.
var staffMadeInactive = map[string]func(f flows, staffID string) error{
	"deactivated": func(f flows, staffID string) error {
		records, err := command.NewRecords[reference.StaffMember](refdata.Staff(f.ES))
		if err != nil {
			return err
		}
		_, err = records.Update(context.Background(), f.MerchantID, "key:race", staffID, func(s *reference.StaffMember) { s.Active = false }, time.Now())
		return err
	},
	"erased": func(f flows, staffID string) error {
		req := ops.ErasureRequest{By: "test", MerchantID: f.MerchantID, SubjectType: event.SubjectStaffMember, SubjectID: staffID,
			Confirm: staffID, CorrelationID: uuid.New()}
		_, err := f.Store.EraseSubject(context.Background(), req, func(ops.Erasure) ops.AuditEntry {
			return ops.AuditEntry{Actor: "test", Action: ops.ActionStaffMemberErase, Target: "staff/" + staffID}
		})
		return err
	},
}

// A staff member is made inactive (PATCH /v1/staff/{id}) or erased while an
// order is being assigned to them: after the assignment checked that they
// are active, before it commits (the hook before its booking). Either the
// change waits for the assignment, which then was made while they were
// active, or the assignment is refused (order.staff_inactive): never an
// assignment that commits after its staff member was made inactive, which
// a read of the staff row without a lock allowed (the change committed at
// once, and the assignment after it).
func TestAnAssignmentNeverCommitsAfterItsStaffMemberWasMadeInactive(t *testing.T) {
	t.Parallel()
	for name, deactivate := range staffMadeInactive {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setupFlows(t, pgtest.NewDB(t))
			orderID := f.CreateOrder(t)

			done := make(chan error, 1)
			deactivatedFirst := false
			hooked := &beforeBook{Transactor: f.Tx, hook: func() {
				go func() { done <- deactivate(f, f.staffID) }()
				// The change either commits, or waits for a lock the
				// assignment holds.
				deactivatedFirst = pgtest.DoneOrWaiting(t, f.ES.DB, done)
			}}
			o, err := command.NewOrderHandlers(hooked)
			require.NoError(t, err)
			_, err = o.Assign(context.Background(), command.AssignOrder{OrderTarget: command.OrderTarget{Meta: f.Meta(), OrderID: orderID},
				StaffID: f.staffID, StartAt: at(9, 0), EndAt: at(10, 0)})
			require.NoError(t, <-done, "the staff member is made inactive")
			if deactivatedFirst {
				var rule *apperr.RuleError
				require.ErrorAs(t, err, &rule, "the staff member was made inactive before the assignment committed: it must be refused, not booked")
				require.Equal(t, "order.staff_inactive", rule.Rule)
				require.Empty(t, f.liveBookings(t))
			} else {
				require.NoError(t, err, "the change waited for the assignment, made while the staff member was active")
			}
			var active bool
			require.NoError(t, f.ES.DB.QueryRow(`SELECT active FROM staff WHERE id = $1`, f.staffID).Scan(&active))
			require.False(t, active)
		})
	}
}

// An operator's key is revoked while one of its writes is under way: after
// the write's transaction checked the key (access.KeyCheck, its first
// batch), before it commits (the hook before its booking). Either the
// revocation waits for the write, which then was made while the key
// worked, or the write is refused (access.ErrKeyRefused): never a write
// that commits after the revocation answered, which a check without a lock
// allowed (the revocation committed at once, and the write after it).
func TestAWriteNeverCommitsAfterItsKeyWasRevoked(t *testing.T) {
	t.Parallel()
	f := setupFlows(t, pgtest.NewDB(t))
	keys, err := refdata.New(f.ES)
	require.NoError(t, err)
	raceAKeysWrite(t, f, "", func(keyID string) error {
		_, err := keys.RevokeKey(context.Background(), keyID, func(_, after access.Key) ops.AuditEntry {
			return ops.AuditEntry{Actor: "test", Action: ops.ActionKeyRevoke, Target: "key/" + after.ID}
		})
		return err
	})
}

// A worker key's staff member is made inactive or erased while one of the
// key's writes is under way: after the write's transaction checked the key
// (which works only while its staff member is active), before it commits.
// Either the change waits for the write, which then was made while the
// staff member was active, or the write is refused (access.ErrKeyRefused):
// never a write of their key that commits after the change answered, as
// for a revocation.
func TestAWorkerKeysWriteNeverCommitsAfterItsStaffMemberWasMadeInactive(t *testing.T) {
	t.Parallel()
	for name, deactivate := range staffMadeInactive {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setupFlows(t, pgtest.NewDB(t))
			worker := f.newStaff(t)
			raceAKeysWrite(t, f, worker, func(string) error { return deactivate(f, worker) })
		})
	}
}

// raceAKeysWrite makes a key (an operator's, or a worker's of staffID) and
// runs one of its writes, an assignment, with stop (which stops the key
// working) started after the write's transaction checked the key and
// before it commits (the hook before its booking). Either stop waits for
// the write, which then committed while the key worked, or the write is
// refused (access.ErrKeyRefused) and writes nothing.
func raceAKeysWrite(t *testing.T, f flows, staffID string, stop func(keyID string) error) {
	t.Helper()
	orderID := f.CreateOrder(t)
	keys, err := refdata.New(f.ES)
	require.NoError(t, err)
	keyID, secret := uuid.New(), "hk_"+uuid.New()
	sum := sha256.Sum256([]byte(secret))
	p := access.Principal{KeyID: keyID, MerchantID: f.MerchantID, Role: access.Operator}
	if staffID != "" {
		p.Role, p.StaffID = access.Worker, staffID
	}
	_, err = f.ES.DB.Exec(`INSERT INTO api_keys (id, merchant_id, role, staff_id, key_hash) VALUES ($1, $2, $3, nullif($4, '')::uuid, $5)`,
		keyID, f.MerchantID, string(p.Role), staffID, sum[:])
	require.NoError(t, err)

	done := make(chan error, 1)
	stoppedFirst := false
	hooked := &beforeBook{Transactor: f.Tx, hook: func() {
		go func() { done <- stop(keyID) }()
		// The change either commits, or waits for a lock the write holds.
		stoppedFirst = pgtest.DoneOrWaiting(t, f.ES.DB, done)
	}}
	o, err := command.NewOrderHandlers(hooked)
	require.NoError(t, err)
	check := keys.KeyCheck(p, secret)
	_, err = o.Assign(access.WithKeyCheck(context.Background(), check), command.AssignOrder{
		OrderTarget: command.OrderTarget{Meta: f.Meta(), OrderID: orderID}, StaffID: f.staffID, StartAt: at(9, 0), EndAt: at(10, 0)})
	require.True(t, check.Passed(), "the key worked when the write checked it")
	require.NoError(t, <-done, "the key is stopped")
	if stoppedFirst {
		require.ErrorIs(t, err, access.ErrKeyRefused, "the key stopped working before the write committed: it must write nothing")
		require.Empty(t, f.liveBookings(t))
	} else {
		require.NoError(t, err, "the change waited for the write, made while the key worked")
	}
}
