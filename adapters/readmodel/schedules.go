package readmodel

import (
	"context"
	"errors"
	"time"

	"github.com/uptrace/bun"

	"hearth/app/query"
)

type scheduleRow struct {
	bun.BaseModel `bun:"table:schedules"`

	ID         string    `bun:"id,pk,type:uuid"`
	MerchantID string    `bun:"merchant_id,type:uuid"`
	OrderID    string    `bun:"order_id,type:uuid"`
	StaffID    string    `bun:"staff_id,type:uuid"`
	StartAt    time.Time `bun:"start_at"`
	EndAt      time.Time `bun:"end_at"`
	Status     string    `bun:"status"`
	Notes      string    `bun:"notes"`
	CreatedAt  time.Time `bun:"created_at"`
	UpdatedAt  time.Time `bun:"updated_at"`
	Version    int       `bun:"version"`
	Erased     []string  `bun:"erased,array"`
}

func (r scheduleRow) view() query.Schedule {
	return query.Schedule{ID: r.ID, MerchantID: r.MerchantID, OrderID: r.OrderID, StaffID: r.StaffID,
		StartAt: r.StartAt.UTC(), EndAt: r.EndAt.UTC(), Status: r.Status, Notes: r.Notes,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(), Version: r.Version, Erased: erasedField(r.Erased)}
}

func scheduleRowOf(v query.Schedule) scheduleRow {
	return scheduleRow{ID: v.ID, MerchantID: v.MerchantID, OrderID: v.OrderID, StaffID: v.StaffID,
		StartAt: v.StartAt, EndAt: v.EndAt, Status: v.Status, Notes: v.Notes,
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Version: v.Version, Erased: erasedColumn(v.Erased)}
}

// Schedules is the schedules projection and read model.
type Schedules struct {
	db                           *bun.DB
	*projection[*query.Schedule] // Name, Apply and ApplyBatch
}

// NewSchedules returns the projection on the read-model database.
func NewSchedules(db *bun.DB) (*Schedules, error) {
	if db == nil {
		return nil, errors.New("readmodel.NewSchedules: nil db")
	}
	return &Schedules{db: db, projection: newProjection(db, schedulesTable)}, nil
}

// Get returns one schedule visible to scope.
func (p *Schedules) Get(ctx context.Context, scope query.Scope, id string) (query.Schedule, error) {
	var row scheduleRow
	if err := getOne(ctx, p.db, &row, scope, "staff_id", id); err != nil {
		return query.Schedule{}, err
	}
	return row.view(), nil
}

// List returns a page of schedules visible to scope.
func (p *Schedules) List(ctx context.Context, scope query.Scope, f query.ScheduleFilter, pg query.Page) (query.List[query.Schedule], error) {
	return listPage[scheduleRow, query.Schedule](ctx, p.db, newListing(scope, "staff_id", "start_at").
		in("status", f.Statuses).eq("staff_id", f.StaffID).between(f.From, f.To), pg)
}

func (r scheduleRow) sortKey(byTime bool) (time.Time, string) {
	if byTime {
		return r.StartAt, r.ID
	}
	return r.CreatedAt, r.ID
}
