// Package readmodel keeps the read-model tables up to date from events
// (projections) and answers the queries of app/query from them.
//
// Every projection applies one event in one read-model transaction: it
// locks the row, skips an event it has already applied (version <= row
// version), refuses one that does not follow the row (a gap: a missing
// predecessor), applies the event through the same fold that write
// responses use, and writes exactly one change-log row. Redelivery is
// therefore harmless, and nothing is ever silently skipped.
package readmodel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"hearth/app/query"
)

type orderRow struct {
	bun.BaseModel `bun:"table:orders"`

	ID                 string     `bun:"id,pk,type:uuid"`
	MerchantID         string     `bun:"merchant_id,type:uuid"`
	RequestID          *string    `bun:"request_id,type:uuid"`
	CustomerID         string     `bun:"customer_id,type:uuid"`
	AmountCents        int64      `bun:"amount_cents"`
	Status             string     `bun:"status"`
	ScheduledStartAt   *time.Time `bun:"scheduled_start_at"`
	ScheduledEndAt     *time.Time `bun:"scheduled_end_at"`
	StaffID            *string    `bun:"staff_id,type:uuid"`
	DispatchNote       string     `bun:"dispatch_note"`
	CancellationReason string     `bun:"cancellation_reason"`
	CompletedAt        *time.Time `bun:"completed_at"`
	SettlementStatus   string     `bun:"settlement_status"`
	PaidAmountCents    int64      `bun:"paid_amount_cents"`
	PaymentMethod      string     `bun:"payment_method"`
	PaidAt             *time.Time `bun:"paid_at"`
	SettlementNote     string     `bun:"settlement_note"`
	Notes              string     `bun:"notes"`
	CreatedAt          time.Time  `bun:"created_at"`
	UpdatedAt          time.Time  `bun:"updated_at"`
	Version            int        `bun:"version"`
	Erased             []string   `bun:"erased,array"`
}

func (r orderRow) view() query.Order {
	return query.Order{
		ID: r.ID, MerchantID: r.MerchantID, RequestID: r.RequestID, CustomerID: r.CustomerID,
		AmountCents: r.AmountCents, Status: r.Status, ScheduledStartAt: utc(r.ScheduledStartAt),
		ScheduledEndAt: utc(r.ScheduledEndAt), StaffID: r.StaffID, DispatchNote: r.DispatchNote,
		CancellationReason: r.CancellationReason, CompletedAt: utc(r.CompletedAt),
		SettlementStatus: r.SettlementStatus, PaidAmountCents: r.PaidAmountCents, PaymentMethod: r.PaymentMethod,
		PaidAt: utc(r.PaidAt), SettlementNote: r.SettlementNote, Notes: r.Notes,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(), Version: r.Version,
		Erased: erasedField(r.Erased),
	}
}

func (r orderRow) sortKey(byTime bool) (time.Time, string) {
	if byTime && r.ScheduledStartAt != nil {
		return *r.ScheduledStartAt, r.ID
	}
	return r.CreatedAt, r.ID
}

func orderRowOf(o query.Order) orderRow {
	return orderRow{
		ID: o.ID, MerchantID: o.MerchantID, RequestID: o.RequestID, CustomerID: o.CustomerID,
		AmountCents: o.AmountCents, Status: o.Status, ScheduledStartAt: o.ScheduledStartAt,
		ScheduledEndAt: o.ScheduledEndAt, StaffID: o.StaffID, DispatchNote: o.DispatchNote,
		CancellationReason: o.CancellationReason, CompletedAt: o.CompletedAt,
		SettlementStatus: o.SettlementStatus, PaidAmountCents: o.PaidAmountCents, PaymentMethod: o.PaymentMethod,
		PaidAt: o.PaidAt, SettlementNote: o.SettlementNote, Notes: o.Notes,
		CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt, Version: o.Version,
		Erased: erasedColumn(o.Erased),
	}
}

// erasedColumn is a view's erased fields as the column stores them (never
// null), erasedField the column as the view holds it (nil when none), so
// that a row read back equals the fold that wrote it.
func erasedColumn(fields []string) []string {
	if fields == nil {
		return []string{}
	}
	return fields
}

func erasedField(column []string) []string {
	if len(column) == 0 {
		return nil
	}
	return column
}

type changeRow struct {
	bun.BaseModel `bun:"table:change_log"`

	ID            int64           `bun:"id,pk,autoincrement"`
	MerchantID    string          `bun:"merchant_id,type:uuid"`
	AggregateType string          `bun:"aggregate_type"`
	AggregateID   string          `bun:"aggregate_id,type:uuid"`
	EventID       string          `bun:"event_id,type:uuid"`
	Version       int             `bun:"version"`
	Action        string          `bun:"action"`
	Actor         string          `bun:"actor"`
	Before        json.RawMessage `bun:"before,type:jsonb,nullzero"`
	After         json.RawMessage `bun:"after,type:jsonb"`
	OccurredAt    time.Time       `bun:"occurred_at"`
}

// GapError is an event that does not follow the row's version: its
// predecessor has not been applied. It is never skipped.
type GapError struct {
	AggregateID string
	RowVersion  int
	Version     int
}

func (e *GapError) Error() string {
	return fmt.Sprintf("aggregate %s: event version %d does not follow row version %d", e.AggregateID, e.Version, e.RowVersion)
}

// Missing returns the versions the row lacks before the event, first and
// last: a replay of parked events reads them from the event store and
// applies them first (projector.Parking, which knows this error by this
// method alone).
func (e *GapError) Missing() (from, to int) { return e.RowVersion + 1, e.Version - 1 }

// Orders is the orders projection and the order read model.
type Orders struct {
	db                        *bun.DB
	*projection[*query.Order] // Name, Apply and ApplyBatch
}

// NewOrders returns the orders projection on the read-model database.
func NewOrders(db *bun.DB) (*Orders, error) {
	if db == nil {
		return nil, errors.New("readmodel.NewOrders: nil db")
	}
	return &Orders{db: db, projection: newProjection(db, ordersTable)}, nil
}

// insertChangesSQL writes change-log rows from one array per column
// (changeColumns): one statement however many rows a batch has (a
// multi-row VALUES list would be a new text of a megabyte for every
// catch-up page, parsed and planned each time).
const insertChangesSQL = `INSERT INTO change_log
	(merchant_id, aggregate_type, aggregate_id, event_id, version, action, actor, before, after, occurred_at)
SELECT * FROM unnest($1::text[]::uuid[], $2::text[], $3::text[]::uuid[], $4::text[]::uuid[], $5::int[], $6::text[], $7::text[],
	$8::jsonb[], $9::jsonb[], $10::timestamptz[])`

// changeColumns are the parameters of insertChangesSQL.
func changeColumns(changes []changeRow) []any {
	n := len(changes)
	merchants, types, aggregates, events := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	versions, actions, actors := make([]int32, n), make([]string, n), make([]string, n)
	befores, afters, occurred := make([]*string, n), make([]string, n), make([]time.Time, n)
	for i, c := range changes {
		merchants[i], types[i], aggregates[i], events[i] = c.MerchantID, c.AggregateType, c.AggregateID, c.EventID
		versions[i], actions[i], actors[i] = int32(c.Version), c.Action, c.Actor
		if c.Before != nil {
			before := string(c.Before)
			befores[i] = &before
		}
		afters[i], occurred[i] = string(c.After), c.OccurredAt
	}
	return []any{merchants, types, aggregates, events, versions, actions, actors, befores, afters, occurred}
}

// Get returns one order visible to scope.
func (p *Orders) Get(ctx context.Context, scope query.Scope, id string) (query.Order, error) {
	var row orderRow
	if err := getOne(ctx, p.db, &row, scope, "staff_id", id); err != nil {
		return query.Order{}, err
	}
	return row.view(), nil
}

// List returns a page of orders visible to scope. With a time range the
// order is by scheduled start (earliest first), otherwise newest first.
func (p *Orders) List(ctx context.Context, scope query.Scope, f query.OrderFilter, pg query.Page) (query.List[query.Order], error) {
	l, err := listPage[orderRow, query.Order](ctx, p.db, newListing(scope, "staff_id", "scheduled_start_at").
		in("status", f.Statuses).eq("settlement_status", f.SettlementStatus).eq("customer_id", f.CustomerID).
		eq("staff_id", f.StaffID).between(f.From, f.To), pg)
	if err != nil {
		return l, fmt.Errorf("list orders: %w", err)
	}
	return l, nil
}

// Changes returns the change log of one aggregate in version order.
func (p *Orders) Changes(ctx context.Context, scope query.Scope, aggregateType, id string) ([]query.Change, error) {
	var rows []changeRow
	err := p.db.NewSelect().Model(&rows).
		Where("merchant_id = ? AND aggregate_type = ? AND aggregate_id = ?", scope.MerchantID, aggregateType, id).
		OrderExpr("version ASC").Scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("select change log: %w", err)
	}
	out := make([]query.Change, len(rows))
	for i, r := range rows {
		out[i] = r.change()
	}
	return out, nil
}

// change is the row as the queries show it.
func (r changeRow) change() query.Change {
	c := query.Change{
		EventID: r.EventID, AggregateType: r.AggregateType, AggregateID: r.AggregateID, Version: r.Version,
		Action: r.Action, Actor: r.Actor, Before: r.Before, After: r.After, OccurredAt: r.OccurredAt.UTC(),
	}
	if r.Before == nil {
		c.Before = nil // a nil json.RawMessage in an interface is not nil
	}
	return c
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
