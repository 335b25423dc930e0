package readmodel

import (
	"context"
	"errors"
	"time"

	"github.com/uptrace/bun"

	"hearth/app/query"
)

type serviceRequestRow struct {
	bun.BaseModel `bun:"table:service_requests"`

	ID                 string     `bun:"id,pk,type:uuid"`
	MerchantID         string     `bun:"merchant_id,type:uuid"`
	CustomerID         string     `bun:"customer_id,type:uuid"`
	CatalogItemID      *string    `bun:"catalog_item_id,type:uuid"`
	Content            string     `bun:"content"`
	AppointmentStartAt *time.Time `bun:"appointment_start_at"`
	AppointmentEndAt   *time.Time `bun:"appointment_end_at"`
	Status             string     `bun:"status"`
	Source             string     `bun:"source"`
	Notes              string     `bun:"notes"`
	OrderID            *string    `bun:"order_id,type:uuid"`
	CreatedAt          time.Time  `bun:"created_at"`
	UpdatedAt          time.Time  `bun:"updated_at"`
	Version            int        `bun:"version"`
	Erased             []string   `bun:"erased,array"`
}

func (r serviceRequestRow) view() query.ServiceRequest {
	return query.ServiceRequest{ID: r.ID, MerchantID: r.MerchantID, CustomerID: r.CustomerID,
		CatalogItemID: r.CatalogItemID, Content: r.Content, AppointmentStartAt: utc(r.AppointmentStartAt),
		AppointmentEndAt: utc(r.AppointmentEndAt), Status: r.Status, Source: r.Source, Notes: r.Notes,
		OrderID: r.OrderID, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(), Version: r.Version, Erased: erasedField(r.Erased)}
}

func serviceRequestRowOf(v query.ServiceRequest) serviceRequestRow {
	return serviceRequestRow{ID: v.ID, MerchantID: v.MerchantID, CustomerID: v.CustomerID,
		CatalogItemID: v.CatalogItemID, Content: v.Content, AppointmentStartAt: v.AppointmentStartAt,
		AppointmentEndAt: v.AppointmentEndAt, Status: v.Status, Source: v.Source, Notes: v.Notes,
		OrderID: v.OrderID, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Version: v.Version, Erased: erasedColumn(v.Erased)}
}

// ServiceRequests is the service_requests projection and read model.
type ServiceRequests struct {
	db                                 *bun.DB
	*projection[*query.ServiceRequest] // Name, Apply and ApplyBatch
}

// NewServiceRequests returns the projection on the read-model database.
func NewServiceRequests(db *bun.DB) (*ServiceRequests, error) {
	if db == nil {
		return nil, errors.New("readmodel.NewServiceRequests: nil db")
	}
	return &ServiceRequests{db: db, projection: newProjection(db, serviceRequestsTable)}, nil
}

// Get returns one request. Worker keys see no requests.
func (p *ServiceRequests) Get(ctx context.Context, scope query.Scope, id string) (query.ServiceRequest, error) {
	var row serviceRequestRow
	if err := getOne(ctx, p.db, &row, scope, "", id); err != nil {
		return query.ServiceRequest{}, err
	}
	return row.view(), nil
}

// List returns a page of requests.
func (p *ServiceRequests) List(ctx context.Context, scope query.Scope, f query.ServiceRequestFilter, pg query.Page) (query.List[query.ServiceRequest], error) {
	return listPage[serviceRequestRow, query.ServiceRequest](ctx, p.db, newListing(scope, "", "appointment_start_at").
		in("status", f.Statuses).eq("customer_id", f.CustomerID).between(f.From, f.To), pg)
}

func (r serviceRequestRow) sortKey(byTime bool) (time.Time, string) {
	if byTime && r.AppointmentStartAt != nil {
		return *r.AppointmentStartAt, r.ID
	}
	return r.CreatedAt, r.ID
}
