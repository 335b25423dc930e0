package httpport

import (
	"time"

	"hearth/app/query"
	"hearth/domain/reference"
)

// The API's response bodies. The application's results carry no wire
// format of their own: each handler maps them to these types, whose JSON
// tags are the API. The view fields keep the order of the application
// types, so the mapping is field by field.

// orderBody is an order as the API shows it.
type orderBody struct {
	ID                 string     `json:"id"`
	RequestID          *string    `json:"request_id"`
	CustomerID         string     `json:"customer_id"`
	CustomerName       string     `json:"customer_name,omitempty"`
	AmountCents        int64      `json:"amount_cents"`
	Status             string     `json:"status"`
	ScheduledStartAt   *time.Time `json:"scheduled_start_at"`
	ScheduledEndAt     *time.Time `json:"scheduled_end_at"`
	StaffID            *string    `json:"staff_id"`
	StaffName          string     `json:"staff_name,omitempty"`
	DispatchNote       string     `json:"dispatch_note"`
	CancellationReason string     `json:"cancellation_reason"`
	CompletedAt        *time.Time `json:"completed_at"`
	SettlementStatus   string     `json:"settlement_status"`
	PaidAmountCents    int64      `json:"paid_amount_cents"`
	PaymentMethod      string     `json:"payment_method"`
	PaidAt             *time.Time `json:"paid_at"`
	SettlementNote     string     `json:"settlement_note"`
	Notes              string     `json:"notes"`
	CreatedAt          time.Time  `json:"created_at"`
	UpdatedAt          time.Time  `json:"updated_at"`
	Version            int        `json:"version"`
}

func orderBodyOf(v query.Order) orderBody {
	return orderBody{
		ID: v.ID, RequestID: v.RequestID, CustomerID: v.CustomerID, CustomerName: v.CustomerName,
		AmountCents: v.AmountCents, Status: v.Status, ScheduledStartAt: v.ScheduledStartAt,
		ScheduledEndAt: v.ScheduledEndAt, StaffID: v.StaffID, StaffName: v.StaffName,
		DispatchNote: v.DispatchNote, CancellationReason: v.CancellationReason, CompletedAt: v.CompletedAt,
		SettlementStatus: v.SettlementStatus, PaidAmountCents: v.PaidAmountCents, PaymentMethod: v.PaymentMethod,
		PaidAt: v.PaidAt, SettlementNote: v.SettlementNote, Notes: v.Notes,
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Version: v.Version,
	}
}

// serviceRequestBody is a service request as the API shows it.
type serviceRequestBody struct {
	ID                 string     `json:"id"`
	CustomerID         string     `json:"customer_id"`
	CustomerName       string     `json:"customer_name,omitempty"`
	CatalogItemID      *string    `json:"catalog_item_id"`
	CatalogItemName    string     `json:"catalog_item_name,omitempty"`
	Content            string     `json:"content"`
	AppointmentStartAt *time.Time `json:"appointment_start_at"`
	AppointmentEndAt   *time.Time `json:"appointment_end_at"`
	Status             string     `json:"status"`
	Source             string     `json:"source"`
	Notes              string     `json:"notes"`
	OrderID            *string    `json:"order_id"`
	CreatedAt          time.Time  `json:"created_at"`
	UpdatedAt          time.Time  `json:"updated_at"`
	Version            int        `json:"version"`
}

func serviceRequestBodyOf(v query.ServiceRequest) serviceRequestBody {
	return serviceRequestBody{
		ID: v.ID, CustomerID: v.CustomerID, CustomerName: v.CustomerName, CatalogItemID: v.CatalogItemID,
		CatalogItemName: v.CatalogItemName, Content: v.Content, AppointmentStartAt: v.AppointmentStartAt,
		AppointmentEndAt: v.AppointmentEndAt, Status: v.Status, Source: v.Source, Notes: v.Notes,
		OrderID: v.OrderID, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Version: v.Version,
	}
}

// scheduleBody is a schedule as the API shows it.
type scheduleBody struct {
	ID        string    `json:"id"`
	OrderID   string    `json:"order_id"`
	StaffID   string    `json:"staff_id"`
	StaffName string    `json:"staff_name,omitempty"`
	StartAt   time.Time `json:"start_at"`
	EndAt     time.Time `json:"end_at"`
	Status    string    `json:"status"`
	Notes     string    `json:"notes"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	Version   int       `json:"version"`
}

func scheduleBodyOf(v query.Schedule) scheduleBody {
	return scheduleBody{
		ID: v.ID, OrderID: v.OrderID, StaffID: v.StaffID, StaffName: v.StaffName, StartAt: v.StartAt,
		EndAt: v.EndAt, Status: v.Status, Notes: v.Notes, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt,
		Version: v.Version,
	}
}

// changeBody is one change-log row; Before and After are the stored
// snapshots, passed through as they are.
type changeBody struct {
	EventID       string    `json:"event_id"`
	AggregateType string    `json:"aggregate_type"`
	AggregateID   string    `json:"aggregate_id"`
	Version       int       `json:"version"`
	Action        string    `json:"action"`
	Actor         string    `json:"actor"`
	Before        any       `json:"before"`
	After         any       `json:"after"`
	OccurredAt    time.Time `json:"occurred_at"`
}

func changeBodyOf(c query.Change) changeBody {
	return changeBody{
		EventID: c.EventID, AggregateType: c.AggregateType, AggregateID: c.AggregateID, Version: c.Version,
		Action: c.Action, Actor: c.Actor, Before: c.Before, After: c.After, OccurredAt: c.OccurredAt,
	}
}

// customerBody is a customer as the API shows it.
type customerBody struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Phone     string    `json:"phone"`
	Email     string    `json:"email"`
	Address   string    `json:"address"`
	Notes     string    `json:"notes"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func customerBodyOf(v reference.Customer) customerBody {
	return customerBody{ID: v.ID, Name: v.Name, Phone: v.Phone, Email: v.Email, Address: v.Address,
		Notes: v.Notes, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt}
}

// staffBody is a staff member as the API shows it.
type staffBody struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Phone     string    `json:"phone"`
	Active    bool      `json:"active"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func staffBodyOf(v reference.StaffMember) staffBody {
	return staffBody{ID: v.ID, Name: v.Name, Phone: v.Phone, Active: v.Active, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt}
}

// catalogItemBody is a catalog item as the API shows it.
type catalogItemBody struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	BasePriceCents int64     `json:"base_price_cents"`
	Active         bool      `json:"active"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

func catalogItemBodyOf(v reference.CatalogItem) catalogItemBody {
	return catalogItemBody{ID: v.ID, Name: v.Name, BasePriceCents: v.BasePriceCents, Active: v.Active,
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt}
}

// listBody is one page of a list. Total counts the matching rows up to
// query.MaxDepth; TotalExact is false when more match. NextCursor, when
// set, is where the next page starts (the cursor parameter). Page is
// omitted on a page that followed a cursor.
type listBody[T any] struct {
	Items      []T    `json:"items"`
	Total      int    `json:"total"`
	TotalExact bool   `json:"total_exact"`
	Page       int    `json:"page,omitempty"`
	PageSize   int    `json:"page_size"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// listBodyOf maps a page; a nil page of items stays nil (null), as the
// application returned it.
func listBodyOf[V, T any](l query.List[V], of func(V) T) listBody[T] {
	b := listBody[T]{Items: mapAll(l.Items, of), Total: l.Total, TotalExact: l.TotalExact, Page: l.Page, PageSize: l.PageSize}
	if l.Next != nil {
		b.NextCursor = FormatCursor(l.Next)
	}
	return b
}

// mapAll maps every item; nil stays nil.
func mapAll[V, T any](vs []V, of func(V) T) []T {
	if vs == nil {
		return nil
	}
	out := make([]T, len(vs))
	for i, v := range vs {
		out[i] = of(v)
	}
	return out
}
