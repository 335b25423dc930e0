// Package apptest is an in-memory command.Transactor, for tests of the use
// cases (app/command) and of the ports (ports/http) without a database. It
// keeps the promises the event store keeps: streams are appended at their
// loaded version + 1 onwards, a stream that moved on since it was loaded is
// a conflict, a staff member's live bookings never overlap, an order has at
// most one live schedule, and a use case that fails appends nothing.
package apptest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"time"

	"hearth/app/command"
	"hearth/domain/apperr"
	"hearth/domain/availability"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/plan"
	"hearth/domain/schedule"
	"hearth/domain/servicerequest"
	"hearth/domain/uuid"
)

// Transactor keeps streams, bookings and reference records in memory.
type Transactor struct {
	// BeforeCommit, when set, runs after a use case decided and before its
	// changes are checked and appended, outside the lock: a test writes
	// there what a concurrent transaction would.
	BeforeCommit func()

	mu       sync.Mutex
	streams  map[string][]event.Recorded // by stream id
	at       map[string]int64            // position of each stream's last event
	position int64
	bookings map[string]Booking // by schedule id
	refs     map[string]ref     // by merchant id + "/" + record id
	zones    map[string]string  // merchant time zones, by merchant id
	visits   map[string]command.PlanVisit
}

// Booking is a schedule's hold on its staff member's time.
type Booking struct {
	MerchantID, OrderID, StaffID string
	StartAt, EndAt               time.Time
	Live                         bool
}

type ref struct {
	name   string
	active bool
	price  int64
	kind   string
	erased bool
}

// New returns an empty store.
func New() *Transactor {
	return &Transactor{streams: map[string][]event.Recorded{}, at: map[string]int64{}, bookings: map[string]Booking{}, refs: map[string]ref{}, zones: map[string]string{}, visits: map[string]command.PlanVisit{}}
}

// SetTimeZone sets the merchant's time zone (UTC until set).
func (t *Transactor) SetTimeZone(merchantID, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.zones[merchantID] = name
}

// AddCustomer adds a customer of the merchant.
func (t *Transactor) AddCustomer(merchantID, id, name string) {
	t.putRef(merchantID, id, ref{kind: "customer", name: name})
}

// EraseCustomer marks a customer of the merchant erased (the row stays,
// as the event store's erasure leaves it).
func (t *Transactor) EraseCustomer(merchantID, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.refs[merchantID+"/"+id]
	r.erased = true
	t.refs[merchantID+"/"+id] = r
}

// AddStaff adds a staff member of the merchant.
func (t *Transactor) AddStaff(merchantID, id string, active bool) {
	t.putRef(merchantID, id, ref{kind: "staff", active: active})
}

// AddCatalogItem adds a catalog item of the merchant.
func (t *Transactor) AddCatalogItem(merchantID, id string, priceCents int64) {
	t.putRef(merchantID, id, ref{kind: "catalog", active: true, price: priceCents})
}

func (t *Transactor) putRef(merchantID, id string, r ref) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refs[merchantID+"/"+id] = r
}

// Stream returns a copy of the stream with the id.
func (t *Transactor) Stream(id string) []event.Recorded {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]event.Recorded(nil), t.streams[id]...)
}

// Types returns the event types of the stream with the id, in order.
func (t *Transactor) Types(id string) []string {
	var types []string
	for _, r := range t.Stream(id) {
		types = append(types, r.Type)
	}
	return types
}

// Position is the number of events appended so far, in every stream.
func (t *Transactor) Position() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.position
}

// Booking returns the booking of the schedule.
func (t *Transactor) Booking(scheduleID string) (Booking, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.bookings[scheduleID]
	return b, ok
}

type aggregate interface {
	ID() string
	Version() int
	Changes() []event.Event
}

type tracked struct {
	streamType string
	agg        aggregate
	loaded     []event.Recorded
}

type session struct {
	t        *Transactor
	meta     event.Meta
	byID     map[string]*tracked
	ordered  []*tracked
	bookings map[string]Booking // booked in this transaction
	names    map[string]string
	required []string // customers RequireCustomer named, checked at commit
}

// Run runs fn and appends what it decided, all or nothing.
func (t *Transactor) Run(ctx context.Context, meta event.Meta, fn func(ctx context.Context, s command.Session) error) (command.Outcome, error) {
	s := &session{t: t, meta: meta, byID: map[string]*tracked{}, bookings: map[string]Booking{}}
	if err := fn(ctx, s); err != nil {
		return command.Outcome{}, err
	}
	for _, id := range s.required {
		if _, found, _ := s.Customer(ctx, id); !found {
			return command.Outcome{}, command.NoCustomer(id)
		}
	}
	if t.BeforeCommit != nil {
		t.BeforeCommit()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out, err := s.commit()
	if err != nil {
		return command.Outcome{}, err
	}
	if i := command.IdempotentOf(ctx); i != nil {
		answer, err := i.Render(ctx, out)
		if err != nil {
			return command.Outcome{}, fmt.Errorf("render idempotent answer: %w", err)
		}
		i.Sealed(answer)
	}
	return out, nil
}

// commit checks every touched stream and booking, then appends; t.mu is
// held.
func (s *session) commit() (command.Outcome, error) {
	for _, tr := range s.ordered {
		if got := len(s.t.streams[tr.agg.ID()]); got != tr.agg.Version() {
			return command.Outcome{}, &apperr.ConflictError{Detail: fmt.Sprintf("%s %s is at version %d, not %d", tr.streamType, tr.agg.ID(), got, tr.agg.Version())}
		}
	}
	for id, b := range s.bookings {
		if err := s.t.clash(id, b, nil); err != nil {
			return command.Outcome{}, err
		}
	}
	out := command.Outcome{Streams: map[string]command.Written{}, Names: s.names}
	for _, tr := range s.ordered {
		id := tr.agg.ID()
		var recs []event.Recorded
		for i, e := range tr.agg.Changes() {
			data, err := json.Marshal(e)
			if err != nil {
				return command.Outcome{}, err
			}
			recs = append(recs, event.Recorded{Event: e, Envelope: event.Envelope{
				ID: uuid.New(), Type: e.EventType(), StreamType: tr.streamType, StreamID: id,
				Version: tr.agg.Version() + i + 1, MerchantID: s.meta.MerchantID, OccurredAt: s.meta.OccurredAt,
				CorrelationID: s.meta.CorrelationID, CausationID: s.meta.CausationID, Actor: s.meta.Actor, Data: data,
			}})
		}
		stream := append(append([]event.Recorded(nil), tr.loaded...), recs...)
		s.t.streams[id] = stream
		if len(recs) > 0 {
			s.t.position += int64(len(recs))
			s.t.at[id] = s.t.position
		}
		out.Streams[id] = command.Written{Stream: stream, Appended: len(recs), Position: s.t.at[id]}
		out.Position = max(out.Position, s.t.at[id])
	}
	maps.Copy(s.t.bookings, s.bookings)
	return out, nil
}

// clash reports a live booking b of schedule id would overlap, among the
// stored bookings and those of pending (nil: none); t.mu is held.
func (t *Transactor) clash(id string, b Booking, pending map[string]Booking) error {
	if !b.Live {
		return nil
	}
	all := maps.Clone(t.bookings)
	maps.Copy(all, pending)
	for other, o := range all {
		if other == id || !o.Live {
			continue
		}
		if o.OrderID == b.OrderID {
			return &apperr.ConflictError{Detail: fmt.Sprintf("order %s already has a live schedule", b.OrderID)}
		}
		if o.StaffID == b.StaffID && o.StartAt.Before(b.EndAt) && b.StartAt.Before(o.EndAt) {
			return &apperr.ConflictError{Detail: fmt.Sprintf("staff member %s is already booked by schedule %s", b.StaffID, other),
				With: map[string]string{"conflicting_schedule_id": other}}
		}
	}
	return nil
}

func (s *session) track(streamType string, a aggregate, loaded []event.Recorded) {
	tr := &tracked{streamType: streamType, agg: a, loaded: loaded}
	s.byID[a.ID()] = tr
	s.ordered = append(s.ordered, tr)
}

func load[A aggregate](s *session, streamType, id string, rehydrate func([]event.Event) (A, error)) (A, error) {
	var zero A
	if tr, ok := s.byID[id]; ok {
		a, ok := tr.agg.(A)
		if !ok {
			return zero, apperr.ErrNotFound
		}
		return a, nil
	}
	stream := s.t.Stream(id)
	if len(stream) == 0 || stream[0].StreamType != streamType || stream[0].MerchantID != s.meta.MerchantID {
		return zero, apperr.ErrNotFound
	}
	events := make([]event.Event, len(stream))
	for i, r := range stream {
		events[i] = r.Event
	}
	a, err := rehydrate(events)
	if err != nil {
		return zero, err
	}
	s.track(streamType, a, stream)
	return a, nil
}

func (s *session) Order(_ context.Context, id string) (*order.Order, error) {
	return load(s, order.StreamType, id, order.Rehydrate)
}

func (s *session) ServiceRequest(_ context.Context, id string) (*servicerequest.Request, error) {
	return load(s, servicerequest.StreamType, id, servicerequest.Rehydrate)
}

func (s *session) Schedule(_ context.Context, id string) (*schedule.Schedule, error) {
	return load(s, schedule.StreamType, id, schedule.Rehydrate)
}

func (s *session) ServicePlan(_ context.Context, id string) (*plan.Plan, error) {
	return load(s, plan.StreamType, id, plan.Rehydrate)
}

func (s *session) AddServicePlan(p *plan.Plan) { s.track(plan.StreamType, p, nil) }

func (s *session) MerchantTimeZone(context.Context) (string, error) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	if tz, ok := s.t.zones[s.meta.MerchantID]; ok {
		return tz, nil
	}
	return "UTC", nil
}

// PlanVisits and SaveVisit keep the generator's ledger; rows are written
// at once (the in-memory store keeps no transaction of them).
func (s *session) PlanVisits(_ context.Context, planID string) ([]command.PlanVisit, error) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	var out []command.PlanVisit
	for _, v := range s.t.visits {
		if v.PlanID == planID {
			v.Existing = true
			out = append(out, v)
		}
	}
	return out, nil
}

func (s *session) SaveVisit(_ context.Context, v command.PlanVisit) error {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	if _, ok := s.t.visits[v.Key]; ok && !v.Existing {
		return &apperr.ConflictError{Detail: "visit " + v.Key + " has an order already"}
	}
	s.t.visits[v.Key] = v
	return nil
}

func (s *session) AddOrder(o *order.Order) { s.track(order.StreamType, o, nil) }
func (s *session) AddServiceRequest(r *servicerequest.Request) {
	s.track(servicerequest.StreamType, r, nil)
}
func (s *session) AddSchedule(sch *schedule.Schedule) { s.track(schedule.StreamType, sch, nil) }

func (s *session) LiveSchedule(ctx context.Context, orderID string) (*schedule.Schedule, bool, error) {
	s.t.mu.Lock()
	all := maps.Clone(s.t.bookings)
	s.t.mu.Unlock()
	maps.Copy(all, s.bookings)
	for id, b := range all {
		if b.Live && b.OrderID == orderID && b.MerchantID == s.meta.MerchantID {
			sch, err := s.Schedule(ctx, id)
			return sch, err == nil, err
		}
	}
	return nil, false, nil
}

func (s *session) Book(_ context.Context, sch *schedule.Schedule) error {
	w := sch.Window()
	b := Booking{MerchantID: s.meta.MerchantID, OrderID: sch.OrderID(), StaffID: w.StaffID, StartAt: w.StartAt, EndAt: w.EndAt,
		Live: sch.Status().Live()}
	s.t.mu.Lock()
	err := s.t.clash(sch.ID(), b, s.bookings)
	s.t.mu.Unlock()
	if err != nil {
		return err
	}
	s.bookings[sch.ID()] = b
	return nil
}

func (s *session) reference(kind, id string) (ref, bool) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	r, ok := s.t.refs[s.meta.MerchantID+"/"+id]
	return r, ok && r.kind == kind
}

// RequireCustomer is checked when fn returns, before the commit.
func (s *session) RequireCustomer(id string) { s.required = append(s.required, id) }

func (s *session) Customer(_ context.Context, id string) (string, bool, error) {
	r, ok := s.reference("customer", id)
	if ok {
		if s.names == nil {
			s.names = map[string]string{}
		}
		s.names[id] = r.name
	}
	return r.name, ok, nil
}

// CustomerErased reports EraseCustomer's mark (erasure itself is the event
// store's, tested on it).
func (s *session) CustomerErased(_ context.Context, id string) (bool, error) {
	r, ok := s.reference("customer", id)
	return ok && r.erased, nil
}

func (s *session) StaffActive(_ context.Context, id string) (exists, active bool, err error) {
	r, ok := s.reference("staff", id)
	return ok, r.active, nil
}

// StaffHours: the fake keeps no working hours (none set).
func (s *session) StaffHours(context.Context, string) (availability.WorkingHours, *time.Location, bool, error) {
	return availability.WorkingHours{}, nil, false, nil
}

func (s *session) CatalogItem(_ context.Context, id string) (int64, bool, bool, error) {
	r, ok := s.reference("catalog", id)
	return r.price, r.active, ok, nil
}
