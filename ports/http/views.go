package httpport

import (
	"slices"
	"time"

	"hearth/app/access"
	"hearth/app/ops"
	"hearth/app/publicevent"
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
	DispatchNote       *string    `json:"dispatch_note"`
	CancellationReason *string    `json:"cancellation_reason"`
	CompletedAt        *time.Time `json:"completed_at"`
	SettlementStatus   string     `json:"settlement_status"`
	PaidAmountCents    int64      `json:"paid_amount_cents"`
	PaymentMethod      string     `json:"payment_method"`
	PaidAt             *time.Time `json:"paid_at"`
	SettlementNote     *string    `json:"settlement_note"`
	Notes              *string    `json:"notes"`
	CreatedAt          time.Time  `json:"created_at"`
	UpdatedAt          time.Time  `json:"updated_at"`
	Version            int        `json:"version"`
	Erased             []string   `json:"erased,omitempty"`
}

// personal is a personal field as the API shows it: null when its data
// subject was erased (the view names it in erased).
func personal(v, field string, erased []string) *string {
	if slices.Contains(erased, field) {
		return nil
	}
	return &v
}

func orderBodyOf(v query.Order) orderBody {
	return orderBody{
		ID: v.ID, RequestID: v.RequestID, CustomerID: v.CustomerID, CustomerName: v.CustomerName,
		AmountCents: v.AmountCents, Status: v.Status, ScheduledStartAt: v.ScheduledStartAt,
		ScheduledEndAt: v.ScheduledEndAt, StaffID: v.StaffID, StaffName: v.StaffName,
		DispatchNote:       personal(v.DispatchNote, "dispatch_note", v.Erased),
		CancellationReason: personal(v.CancellationReason, "cancellation_reason", v.Erased), CompletedAt: v.CompletedAt,
		SettlementStatus: v.SettlementStatus, PaidAmountCents: v.PaidAmountCents, PaymentMethod: v.PaymentMethod,
		PaidAt: v.PaidAt, SettlementNote: personal(v.SettlementNote, "settlement_note", v.Erased),
		Notes:     personal(v.Notes, "notes", v.Erased),
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Version: v.Version, Erased: v.Erased,
	}
}

// serviceRequestBody is a service request as the API shows it.
type serviceRequestBody struct {
	ID                 string     `json:"id"`
	CustomerID         string     `json:"customer_id"`
	CustomerName       string     `json:"customer_name,omitempty"`
	CatalogItemID      *string    `json:"catalog_item_id"`
	CatalogItemName    string     `json:"catalog_item_name,omitempty"`
	Content            *string    `json:"content"`
	AppointmentStartAt *time.Time `json:"appointment_start_at"`
	AppointmentEndAt   *time.Time `json:"appointment_end_at"`
	Status             string     `json:"status"`
	Source             string     `json:"source"`
	Notes              *string    `json:"notes"`
	OrderID            *string    `json:"order_id"`
	CreatedAt          time.Time  `json:"created_at"`
	UpdatedAt          time.Time  `json:"updated_at"`
	Version            int        `json:"version"`
	Erased             []string   `json:"erased,omitempty"`
}

func serviceRequestBodyOf(v query.ServiceRequest) serviceRequestBody {
	return serviceRequestBody{
		ID: v.ID, CustomerID: v.CustomerID, CustomerName: v.CustomerName, CatalogItemID: v.CatalogItemID,
		CatalogItemName: v.CatalogItemName, Content: personal(v.Content, "content", v.Erased), AppointmentStartAt: v.AppointmentStartAt,
		AppointmentEndAt: v.AppointmentEndAt, Status: v.Status, Source: v.Source, Notes: personal(v.Notes, "notes", v.Erased),
		OrderID: v.OrderID, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Version: v.Version, Erased: v.Erased,
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
	Notes     *string   `json:"notes"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	Version   int       `json:"version"`
	Erased    []string  `json:"erased,omitempty"`
}

func scheduleBodyOf(v query.Schedule) scheduleBody {
	return scheduleBody{
		ID: v.ID, OrderID: v.OrderID, StaffID: v.StaffID, StaffName: v.StaffName, StartAt: v.StartAt,
		EndAt: v.EndAt, Status: v.Status, Notes: personal(v.Notes, "notes", v.Erased), CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt,
		Version: v.Version, Erased: v.Erased,
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
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Phone     string     `json:"phone"`
	Email     string     `json:"email"`
	Address   string     `json:"address"`
	Notes     string     `json:"notes"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
	ErasedAt  *time.Time `json:"erased_at,omitempty"`
}

func customerBodyOf(v reference.Customer) customerBody {
	return customerBody{ID: v.ID, Name: v.Name, Phone: v.Phone, Email: v.Email, Address: v.Address,
		Notes: v.Notes, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, ErasedAt: v.ErasedAt}
}

// staffBody is a staff member as the API shows it.
type staffBody struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Phone     string     `json:"phone"`
	Active    bool       `json:"active"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
	ErasedAt  *time.Time `json:"erased_at,omitempty"`
}

func staffBodyOf(v reference.StaffMember) staffBody {
	return staffBody{ID: v.ID, Name: v.Name, Phone: v.Phone, Active: v.Active, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt,
		ErasedAt: v.ErasedAt}
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

// mapAll maps every item. No item is an empty list, never nil: the API's
// lists are arrays, never null (a client iterates them as they come).
func mapAll[V, T any](vs []V, of func(V) T) []T {
	out := make([]T, len(vs))
	for i, v := range vs {
		out[i] = of(v)
	}
	return out
}

// The admin API's bodies. The CLI's --json prints the same (ParkedBodyOf,
// KeyBodyOf, AuditEntryBodyOf), so the two formats never differ.

// ParkedBody is a parked aggregate as the admin API and `app parked list
// --json` show it.
type ParkedBody struct {
	Projection    string            `json:"projection"`
	StreamID      string            `json:"stream_id"`
	StreamType    string            `json:"stream_type"`
	MerchantID    string            `json:"merchant_id"`
	Reason        string            `json:"reason"`
	FirstEventID  string            `json:"first_event_id"`
	FirstVersion  int               `json:"first_version"`
	Waiting       int               `json:"waiting"`
	Since         time.Time         `json:"since"`
	Attempts      int               `json:"attempts"`
	LastAttemptAt time.Time         `json:"last_attempt_at"`
	Events        []parkedEventBody `json:"events,omitempty"`
}

type parkedEventBody struct {
	EventID  string    `json:"event_id"`
	Type     string    `json:"type"`
	Version  int       `json:"version"`
	ParkedAt time.Time `json:"parked_at"`
}

// ParkedBodyOf maps a parked aggregate.
func ParkedBodyOf(a ops.ParkedAggregate) ParkedBody {
	return ParkedBody{
		Projection: a.Projection, StreamID: a.StreamID, StreamType: a.StreamType, MerchantID: a.MerchantID,
		Reason: a.Reason, FirstEventID: a.FirstEventID, FirstVersion: a.FirstVersion, Waiting: a.Waiting,
		Since: a.Since, Attempts: a.Attempts, LastAttemptAt: a.LastAttemptAt,
		Events: mapAll(a.Events, func(e ops.ParkedEvent) parkedEventBody {
			return parkedEventBody{EventID: e.EventID, Type: e.Type, Version: e.Version, ParkedAt: e.ParkedAt}
		}),
	}
}

type replayBody struct {
	Projection string `json:"projection"`
	StreamID   string `json:"stream_id"`
	Applied    int    `json:"applied"`
	Unparked   bool   `json:"unparked"`
	Waiting    int    `json:"waiting"`
	Error      string `json:"error,omitempty"`
}

func replayBodyOf(r ops.ReplayResult) replayBody {
	return replayBody{Projection: r.Projection, StreamID: r.StreamID, Applied: r.Applied, Unparked: r.Unparked,
		Waiting: r.Waiting, Error: r.Error}
}

type skipBody struct {
	Projection string `json:"projection"`
	StreamID   string `json:"stream_id"`
	EventID    string `json:"event_id"`
	Version    int    `json:"version"`
	Type       string `json:"type"`
	SkippedBy  string `json:"skipped_by"`
	Reason     string `json:"reason"`
	Waiting    int    `json:"waiting"`
	Unparked   bool   `json:"unparked"`
}

func skipBodyOf(r ops.SkipResult) skipBody {
	return skipBody{Projection: r.Projection, StreamID: r.StreamID, EventID: r.EventID, Version: r.Version,
		Type: r.Type, SkippedBy: r.SkippedBy, Reason: r.Reason, Waiting: r.Waiting, Unparked: r.Unparked}
}

type rebuildBody struct {
	Projection string    `json:"projection"`
	Phase      string    `json:"phase"`
	Events     int64     `json:"events"`
	Total      int64     `json:"total"`
	Rows       int64     `json:"rows"`
	Rate       float64   `json:"events_per_second"`
	ETA        string    `json:"eta,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	Error      string    `json:"error,omitempty"`
}

func rebuildBodyOf(p ops.RebuildProgress) rebuildBody {
	return rebuildBody{Projection: p.Projection, Phase: p.Phase, Events: p.Events, Total: p.Total, Rows: p.Rows,
		Rate: p.Rate, ETA: p.ETA, StartedAt: p.StartedAt, FinishedAt: p.FinishedAt, Error: p.Error}
}

// AuditEntryBody is an entry of the audit log as the admin API and `app
// audit list --json` show it.
type AuditEntryBody struct {
	ID      int64          `json:"id"`
	At      time.Time      `json:"at"`
	Actor   string         `json:"actor"`
	Action  string         `json:"action"`
	Target  string         `json:"target"`
	Details map[string]any `json:"details"`
}

// AuditEntryBodyOf maps an audit entry.
func AuditEntryBodyOf(e ops.AuditEntry) AuditEntryBody {
	return AuditEntryBody{ID: e.ID, At: e.At, Actor: e.Actor, Action: e.Action, Target: e.Target, Details: e.Details}
}

// KeyBody is an API key as the admin API and `app keys list --json` show
// it: never its secret or its hash.
type KeyBody struct {
	ID           string      `json:"id"`
	MerchantID   string      `json:"merchant_id,omitempty"`
	MerchantName string      `json:"merchant_name,omitempty"`
	Role         access.Role `json:"role"`
	StaffID      string      `json:"staff_id,omitempty"`
	Name         string      `json:"name"`
	CreatedAt    time.Time   `json:"created_at"`
	LastUsedAt   *time.Time  `json:"last_used_at"`
	ExpiresAt    *time.Time  `json:"expires_at"`
	RevokedAt    *time.Time  `json:"revoked_at"`
}

// KeyBodyOf maps a key.
func KeyBodyOf(k access.Key) KeyBody {
	return KeyBody{ID: k.ID, MerchantID: k.MerchantID, MerchantName: k.MerchantName, Role: k.Role, StaffID: k.StaffID,
		Name: k.Name, CreatedAt: k.CreatedAt, LastUsedAt: k.LastUsedAt, ExpiresAt: k.ExpiresAt, RevokedAt: k.RevokedAt}
}

// newKeyBody is a key just created, with its secret (shown once).
type newKeyBody struct {
	KeyBody
	Secret string `json:"secret"`
}

func newKeyBodyOf(k access.NewKey) newKeyBody {
	return newKeyBody{KeyBody: KeyBodyOf(k.Key), Secret: k.Secret}
}

// rotationBody is the new key (with its secret) and the previous one.
type rotationBody struct {
	newKeyBody
	Previous KeyBody `json:"previous"`
}

func rotationBodyOf(r access.Rotation) rotationBody {
	return rotationBody{newKeyBody: newKeyBodyOf(r.NewKey), Previous: KeyBodyOf(r.Previous)}
}

// eventBody is one event of the feed: the public event, and the cursor
// that continues after it.
type eventBody struct {
	publicevent.Event
	Cursor string `json:"cursor"`
}

// eventListBody is one page of the feed.
type eventListBody struct {
	Events     []eventBody `json:"events"`
	NextCursor string      `json:"next_cursor"`
}

func eventListBodyOf(p query.FeedPage) eventListBody {
	out := eventListBody{Events: make([]eventBody, len(p.Events)), NextCursor: p.Next.String()}
	for i, e := range p.Events {
		out.Events[i] = eventBody{Event: e.Event, Cursor: e.Cursor.String()}
	}
	return out
}
