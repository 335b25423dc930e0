package readmodel

import (
	"context"
	"errors"
	"time"

	"github.com/uptrace/bun"

	"hearth/app/query"
	"hearth/domain/civil"
	"hearth/domain/plan"
)

type planRow struct {
	bun.BaseModel `bun:"table:plans"`

	ID            string             `bun:"id,pk,type:uuid"`
	MerchantID    string             `bun:"merchant_id,type:uuid"`
	CustomerID    string             `bun:"customer_id,type:uuid"`
	CatalogItemID string             `bun:"catalog_item_id,type:uuid"`
	StaffID       *string            `bun:"staff_id,type:uuid"`
	TimeZone      string             `bun:"time_zone"`
	Status        string             `bun:"status"`
	PriceCents    int64              `bun:"price_cents"`
	Terms         plan.Terms         `bun:"terms,type:jsonb"`
	ChangedFrom   *civil.Date        `bun:"changed_from,type:jsonb"`
	Skipped       []civil.Date       `bun:"skipped,type:jsonb"`
	Moved         []query.MovedVisit `bun:"moved,type:jsonb"`
	PausedAt      *time.Time         `bun:"paused_at"`
	EndedAt       *time.Time         `bun:"ended_at"`
	CreatedAt     time.Time          `bun:"created_at"`
	UpdatedAt     time.Time          `bun:"updated_at"`
	Version       int                `bun:"version"`
}

func (r planRow) view() query.Plan {
	v := query.Plan{ID: r.ID, MerchantID: r.MerchantID, CustomerID: r.CustomerID, CatalogItemID: r.CatalogItemID,
		StaffID: r.StaffID, TimeZone: r.TimeZone, Status: r.Status, Terms: r.Terms, ChangedFrom: r.ChangedFrom, Skipped: r.Skipped, Moved: r.Moved,
		PausedAt: utc(r.PausedAt), EndedAt: utc(r.EndedAt), CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(), Version: r.Version}
	if v.Skipped == nil {
		v.Skipped = []civil.Date{}
	}
	if v.Moved == nil {
		v.Moved = []query.MovedVisit{}
	}
	return v
}

func planRowOf(v query.Plan) planRow {
	return planRow{ID: v.ID, MerchantID: v.MerchantID, CustomerID: v.CustomerID, CatalogItemID: v.CatalogItemID,
		StaffID: v.StaffID, TimeZone: v.TimeZone, Status: v.Status, PriceCents: v.Terms.PriceCents, Terms: v.Terms, ChangedFrom: v.ChangedFrom,
		Skipped: v.Skipped, Moved: v.Moved, PausedAt: v.PausedAt, EndedAt: v.EndedAt,
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Version: v.Version}
}

func (r planRow) sortKey(bool) (time.Time, string) { return r.CreatedAt, r.ID }

// Plans is the service plans' projection and read model.
type Plans struct {
	db                       *bun.DB
	*projection[*query.Plan] // Name, Apply and ApplyBatch
}

// NewPlans returns the projection on the read-model database.
func NewPlans(db *bun.DB) (*Plans, error) {
	if db == nil {
		return nil, errors.New("readmodel.NewPlans: nil db")
	}
	return &Plans{db: db, projection: newProjection(db, plansTable)}, nil
}

// Get returns one plan of the merchant (workers see none).
func (p *Plans) Get(ctx context.Context, scope query.Scope, id string) (query.Plan, error) {
	var row planRow
	if err := getOne(ctx, p.db, &row, scope, "", id); err != nil {
		return query.Plan{}, err
	}
	return row.view(), nil
}

// List returns a page of plans, newest first.
func (p *Plans) List(ctx context.Context, scope query.Scope, f query.PlanFilter, pg query.Page) (query.List[query.Plan], error) {
	return listPage[planRow, query.Plan](ctx, p.db, newListing(scope, "", "created_at").
		in("status", f.Statuses).eq("customer_id", f.CustomerID), pg)
}
