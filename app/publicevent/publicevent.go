// Package publicevent is the public form of Hearth's domain events: what
// the event feed (GET /v1/events), webhook deliveries and the NATS relay
// carry to client apps.
//
// It is a contract with integrators, versioned by SchemaVersion, and kept
// apart from the stored events on purpose: a stored event's fields may
// change with the aggregate (and carry internal facts: the acting key, the
// correlation and causation ids), while a public event only ever gains
// optional fields within one schema version. Every type the package can
// produce is listed in Types, which the OpenAPI document must match
// (ports/http's openapi_test.go checks it).
package publicevent

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/plan"
	"hearth/domain/schedule"
	"hearth/domain/servicerequest"
)

// SchemaVersion is the version of the public form. It changes only when a
// field is removed or changes meaning; new optional fields keep it.
const SchemaVersion = 1

// Event is one public event.
type Event struct {
	// ID is the event's id, unique for ever: receivers deduplicate by it.
	ID string `json:"id"`
	// Type names the event, "<aggregate>.<what happened>" (see Types).
	Type string `json:"type"`
	// SchemaVersion is the version of this form (SchemaVersion).
	SchemaVersion int `json:"schema_version"`
	// MerchantID is the merchant whose data changed.
	MerchantID string `json:"merchant_id"`
	// AggregateType is "order", "schedule" or "service_request"
	// ("webhook_endpoint" for a ping, "customer" or "staff_member" for
	// their erasure).
	AggregateType string `json:"aggregate_type"`
	// AggregateID is the id of the order, schedule or service request.
	AggregateID string `json:"aggregate_id"`
	// AggregateVersion is the aggregate's version after this event: 1 for
	// the event that created it, then one more per event, without gaps.
	AggregateVersion int `json:"aggregate_version"`
	// Position is the event's position in the event store, the position
	// writes answer with and GET's min_position takes. A merchant's
	// positions increase along its feed, with gaps (other merchants' events).
	Position int64 `json:"position"`
	// OccurredAt is when the command that caused the event ran (UTC).
	OccurredAt time.Time `json:"occurred_at"`
	// Data is the event's payload, one of the *Data types below by Type.
	Data any `json:"data"`
}

// Stored is what From needs of a stored event besides the decoded payload.
type Stored struct {
	event.Recorded
	Position int64
}

// The aggregate types, as public events name them.
const (
	AggregateOrder           = "order"
	AggregateSchedule        = "schedule"
	AggregateServiceRequest  = "service_request"
	AggregateServicePlan     = "service_plan"
	AggregateWebhookEndpoint = "webhook_endpoint"
	AggregateCustomer        = "customer"
	AggregateStaffMember     = "staff_member"
)

// The public event types.
const (
	OrderCreated              = "order.created"
	OrderDetailsUpdated       = "order.details_updated"
	OrderStatusChanged        = "order.status_changed"
	OrderCancelled            = "order.cancelled"
	OrderAssignmentUpdated    = "order.assignment_updated"
	OrderSettlementUpdated    = "order.settlement_updated"
	ScheduleCreated           = "schedule.created"
	ScheduleAssignmentUpdated = "schedule.assignment_updated"
	ScheduleStatusChanged     = "schedule.status_changed"
	RequestCreated            = "service_request.created"
	RequestDetailsUpdated     = "service_request.details_updated"
	RequestStatusChanged      = "service_request.status_changed"
	RequestConverted          = "service_request.converted"
	// Skipped stands for an event an operator skipped because no
	// projection could apply it (see docs/operations.md, parking). Its data
	// names the skipped event's stored type and nothing else.
	// CustomerErased and StaffMemberErased tell receivers that an operator
	// erased a customer or a staff member (GDPR article 17): erase your
	// copies of their data.
	CustomerErased             = "customer.erased"
	StaffMemberErased          = "staff_member.erased"
	OrderPersonalDataErased    = "order.personal_data_erased"
	SchedulePersonalDataErased = "schedule.personal_data_erased"
	RequestPersonalDataErased  = "service_request.personal_data_erased"
	OrderSkipped               = "order.event_skipped"
	ScheduleSkipped            = "schedule.event_skipped"
	RequestSkipped             = "service_request.event_skipped"
	WebhookEndpointPinged      = "webhook_endpoint.ping"

	PlanCreated      = "service_plan.created"
	PlanChanged      = "service_plan.changed"
	PlanVisitSkipped = "service_plan.visit_skipped"
	PlanVisitMoved   = "service_plan.visit_moved"
	PlanPaused       = "service_plan.paused"
	PlanResumed      = "service_plan.resumed"
	PlanEnded        = "service_plan.ended"
	PlanSkipped      = "service_plan.event_skipped"
)

// PlanTermsData is a plan's terms from a visit on: local times of day
// ("09:00") and dates ("2026-03-29") in the plan's time zone.
type PlanTermsData struct {
	PriceCents int64              `json:"price_cents"`
	StaffID    string             `json:"staff_id,omitempty"`
	Window     PlanWindowData     `json:"window"`
	Recurrence PlanRecurrenceData `json:"recurrence"`
}

// PlanWindowData is the local time window of a plan's visits.
type PlanWindowData struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

// PlanRecurrenceData is when a plan's visits fall. Weekdays are 0
// (Sunday) to 6 (Saturday).
type PlanRecurrenceData struct {
	Frequency string `json:"frequency"`
	Interval  int    `json:"interval"`
	Weekdays  []int  `json:"weekdays,omitempty"`
	MonthDay  int    `json:"month_day,omitempty"`
	Start     string `json:"start"`
	Until     string `json:"until,omitempty"`
	Count     int    `json:"count,omitempty"`
}

// PlanCreatedData is the data of service_plan.created.
type PlanCreatedData struct {
	CustomerID    string        `json:"customer_id"`
	CatalogItemID string        `json:"catalog_item_id"`
	TimeZone      string        `json:"time_zone"`
	Terms         PlanTermsData `json:"terms"`
}

// PlanChangedData is the data of service_plan.changed: the new terms from
// the visit dated From on.
type PlanChangedData struct {
	From  string        `json:"from"`
	Terms PlanTermsData `json:"terms"`
}

// PlanVisitData is the data of service_plan.visit_skipped and
// service_plan.visit_moved: the visit's original date and, for a move,
// where it starts now.
type PlanVisitData struct {
	Date   string `json:"date"`
	ToDate string `json:"to_date,omitempty"`
	Start  string `json:"start,omitempty"`
}

// PlanAtData is the data of service_plan.paused, .resumed and .ended.
type PlanAtData struct {
	At time.Time `json:"at"`
}

func planTermsData(t plan.Terms) PlanTermsData {
	r := t.Recurrence
	d := PlanTermsData{PriceCents: t.PriceCents, StaffID: t.StaffID,
		Window: PlanWindowData{Start: t.Window.Start.String(), End: t.Window.End.String()},
		Recurrence: PlanRecurrenceData{Frequency: string(r.Frequency), Interval: r.Interval, MonthDay: r.MonthDay,
			Start: r.Start.String(), Count: r.Count}}
	for _, w := range r.Weekdays {
		d.Recurrence.Weekdays = append(d.Recurrence.Weekdays, int(w))
	}
	if r.Until != nil {
		d.Recurrence.Until = r.Until.String()
	}
	return d
}

// OrderCreatedData is the data of order.created.
type OrderCreatedData struct {
	RequestID        string     `json:"request_id,omitempty"`
	CustomerID       string     `json:"customer_id"`
	AmountCents      int64      `json:"amount_cents"`
	Notes            *string    `json:"notes"`
	ScheduledStartAt *time.Time `json:"scheduled_start_at,omitempty"`
	ScheduledEndAt   *time.Time `json:"scheduled_end_at,omitempty"`
	Status           string     `json:"status"`
	Personal
	// PlanID and VisitDate are set on an order the visit generator created
	// for a service plan's visit (its original local date, YYYY-MM-DD).
	PlanID    string `json:"plan_id,omitempty"`
	VisitDate string `json:"visit_date,omitempty"`
}

// OrderDetailsUpdatedData is the data of order.details_updated: the new
// values of all three fields.
type OrderDetailsUpdatedData struct {
	CustomerID  string  `json:"customer_id"`
	AmountCents int64   `json:"amount_cents"`
	Notes       *string `json:"notes"`
	Personal
}

// StatusChangedData is the data of every *.status_changed. CompletedAt is
// set on an order that became completed.
type StatusChangedData struct {
	From        string     `json:"from"`
	To          string     `json:"to"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
}

// OrderCancelledData is the data of order.cancelled.
type OrderCancelledData struct {
	From   string  `json:"from"`
	Reason *string `json:"reason"`
	Personal
}

// OrderAssignmentUpdatedData is the data of order.assignment_updated. An
// absent staff_id means the order lost its assignment (its schedule was
// cancelled); absent times leave the window as it was.
type OrderAssignmentUpdatedData struct {
	StaffID      string     `json:"staff_id,omitempty"`
	StartAt      *time.Time `json:"start_at,omitempty"`
	EndAt        *time.Time `json:"end_at,omitempty"`
	DispatchNote *string    `json:"dispatch_note"`
	Personal
}

// OrderSettlementUpdatedData is the data of order.settlement_updated.
type OrderSettlementUpdatedData struct {
	SettlementStatus string     `json:"settlement_status"`
	PaidAmountCents  int64      `json:"paid_amount_cents"`
	PaymentMethod    string     `json:"payment_method"`
	PaidAt           *time.Time `json:"paid_at,omitempty"`
	SettlementNote   *string    `json:"settlement_note"`
	Personal
}

// ScheduleCreatedData is the data of schedule.created.
type ScheduleCreatedData struct {
	OrderID string    `json:"order_id"`
	StaffID string    `json:"staff_id"`
	StartAt time.Time `json:"start_at"`
	EndAt   time.Time `json:"end_at"`
	Notes   *string   `json:"notes"`
	Status  string    `json:"status"`
	Personal
}

// ScheduleAssignmentUpdatedData is the data of schedule.assignment_updated.
type ScheduleAssignmentUpdatedData struct {
	StaffID string    `json:"staff_id"`
	StartAt time.Time `json:"start_at"`
	EndAt   time.Time `json:"end_at"`
}

// RequestCreatedData is the data of service_request.created.
type RequestCreatedData struct {
	CustomerID         string     `json:"customer_id"`
	CatalogItemID      string     `json:"catalog_item_id,omitempty"`
	Content            *string    `json:"content"`
	AppointmentStartAt *time.Time `json:"appointment_start_at,omitempty"`
	AppointmentEndAt   *time.Time `json:"appointment_end_at,omitempty"`
	Source             string     `json:"source"`
	Notes              *string    `json:"notes"`
	Status             string     `json:"status"`
	Personal
}

// RequestDetailsUpdatedData is the data of service_request.details_updated:
// the new values of all its fields.
type RequestDetailsUpdatedData struct {
	CatalogItemID      string     `json:"catalog_item_id,omitempty"`
	Content            *string    `json:"content"`
	AppointmentStartAt *time.Time `json:"appointment_start_at,omitempty"`
	AppointmentEndAt   *time.Time `json:"appointment_end_at,omitempty"`
	Notes              *string    `json:"notes"`
	Personal
}

// RequestConvertedData is the data of service_request.converted.
type RequestConvertedData struct {
	OrderID string `json:"order_id"`
}

// Personal is part of the data of every public event that carries personal
// data (free text about a customer). Such a field is null when it is not
// there to read, and the reason names it: Erased when the customer was
// erased (Hearth holds the text no more), Withheld when this copy leaves it
// out (the NATS relay never carries personal data: docs/personal-data.md).
type Personal struct {
	Erased   []string `json:"erased,omitempty"`
	Withheld []string `json:"withheld,omitempty"`
}

// PersonalDataErasedData is the data of every *.personal_data_erased: the
// customer whose data in this aggregate was erased. Earlier events of the
// aggregate now read with their personal fields null (erased); receivers
// should erase their copies.
type PersonalDataErasedData struct {
	SubjectType string `json:"subject_type"`
	SubjectID   string `json:"subject_id"`
}

// SubjectErasedData is the data of customer.erased and staff_member.erased;
// the event's aggregate is the subject.
type SubjectErasedData struct {
	ErasedAt time.Time `json:"erased_at"`
}

// SkippedData is the data of every *.event_skipped.
type SkippedData struct {
	// Of is the stored type of the skipped event.
	Of string `json:"of"`
}

// PingData is the data of webhook_endpoint.ping, the event a webhook
// endpoint's test sends.
type PingData struct {
	Message string `json:"message"`
}

// Types returns every public event type, sorted.
func Types() []string {
	out := make([]string, 0, len(dataTypes))
	for t := range dataTypes {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// DataOf returns a zero value of the data type of a public event type.
func DataOf(eventType string) (any, bool) {
	d, ok := dataTypes[eventType]
	return d, ok
}

var dataTypes = map[string]any{
	OrderCreated:               OrderCreatedData{},
	OrderDetailsUpdated:        OrderDetailsUpdatedData{},
	OrderStatusChanged:         StatusChangedData{},
	OrderCancelled:             OrderCancelledData{},
	OrderAssignmentUpdated:     OrderAssignmentUpdatedData{},
	OrderSettlementUpdated:     OrderSettlementUpdatedData{},
	ScheduleCreated:            ScheduleCreatedData{},
	ScheduleAssignmentUpdated:  ScheduleAssignmentUpdatedData{},
	ScheduleStatusChanged:      StatusChangedData{},
	RequestCreated:             RequestCreatedData{},
	RequestDetailsUpdated:      RequestDetailsUpdatedData{},
	RequestStatusChanged:       StatusChangedData{},
	RequestConverted:           RequestConvertedData{},
	CustomerErased:             SubjectErasedData{},
	StaffMemberErased:          SubjectErasedData{},
	OrderPersonalDataErased:    PersonalDataErasedData{},
	SchedulePersonalDataErased: PersonalDataErasedData{},
	RequestPersonalDataErased:  PersonalDataErasedData{},
	OrderSkipped:               SkippedData{},
	ScheduleSkipped:            SkippedData{},
	RequestSkipped:             SkippedData{},
	WebhookEndpointPinged:      PingData{},
	PlanCreated:                PlanCreatedData{},
	PlanChanged:                PlanChangedData{},
	PlanVisitSkipped:           PlanVisitData{},
	PlanVisitMoved:             PlanVisitData{},
	PlanPaused:                 PlanAtData{},
	PlanResumed:                PlanAtData{},
	PlanEnded:                  PlanAtData{},
	PlanSkipped:                SkippedData{},
}

// aggregateOf maps stored stream types to public aggregate types.
var aggregateOf = map[string]string{
	order.StreamType:          AggregateOrder,
	schedule.StreamType:       AggregateSchedule,
	servicerequest.StreamType: AggregateServiceRequest,
	plan.StreamType:           AggregateServicePlan,
}

// From returns the public form of a stored event. An event it cannot map
// (an unknown stream type, a payload type it does not know) is an error
// that names the event: the store only ever holds events the domain wrote,
// so such an event is a bug or a corruption, never to be sent as zero
// values.
func From(s Stored) (Event, error) {
	if e, ok := s.Event.(event.SubjectErased); ok && s.StreamType == event.SubjectStreamType {
		typ, agg := CustomerErased, AggregateCustomer
		if e.SubjectType == event.SubjectStaffMember {
			typ, agg = StaffMemberErased, AggregateStaffMember
		}
		return Event{
			ID: s.ID, Type: typ, SchemaVersion: SchemaVersion, MerchantID: s.MerchantID,
			AggregateType: agg, AggregateID: s.StreamID, AggregateVersion: s.Version,
			Position: s.Position, OccurredAt: event.Instant(s.OccurredAt), Data: SubjectErasedData{ErasedAt: event.Instant(s.OccurredAt)},
		}, nil
	}
	agg, ok := aggregateOf[s.StreamType]
	if !ok {
		return Event{}, fmt.Errorf("event %s: stream type %q has no public form", s.ID, s.StreamType)
	}
	typ, data, err := mapData(agg, s.Event)
	if err != nil {
		return Event{}, fmt.Errorf("event %s (%s version %d): %w", s.ID, s.StreamID, s.Version, err)
	}
	return Event{
		ID: s.ID, Type: typ, SchemaVersion: SchemaVersion, MerchantID: s.MerchantID,
		AggregateType: agg, AggregateID: s.StreamID, AggregateVersion: s.Version,
		Position: s.Position, OccurredAt: event.Instant(s.OccurredAt), Data: data,
	}, nil
}

func mapData(agg string, e event.Event) (string, any, error) {
	switch e := e.(type) {
	case order.Created:
		return OrderCreated, OrderCreatedData{
			RequestID: e.RequestID, CustomerID: e.CustomerID, AmountCents: e.AmountCents, Notes: text(e.Notes, "notes", e.Erasure),
			ScheduledStartAt: e.ScheduledStartAt, ScheduledEndAt: e.ScheduledEndAt, Status: string(e.Status),
			Personal: erasedOf(e.Erasure, "notes"),
			PlanID:   e.PlanID, VisitDate: e.VisitDate,
		}, nil
	case order.DetailsUpdated:
		return OrderDetailsUpdated, OrderDetailsUpdatedData{CustomerID: e.CustomerID, AmountCents: e.AmountCents,
			Notes: text(e.Notes, "notes", e.Erasure), Personal: erasedOf(e.Erasure, "notes")}, nil
	case order.StatusChanged:
		return OrderStatusChanged, StatusChangedData{From: string(e.From), To: string(e.To), CompletedAt: e.CompletedAt}, nil
	case order.Cancelled:
		return OrderCancelled, OrderCancelledData{From: string(e.From), Reason: text(e.Reason, "reason", e.Erasure),
			Personal: erasedOf(e.Erasure, "reason")}, nil
	case order.AssignmentUpdated:
		return OrderAssignmentUpdated, OrderAssignmentUpdatedData{
			StaffID: e.StaffID, StartAt: e.StartAt, EndAt: e.EndAt, DispatchNote: text(e.DispatchNote, "dispatch_note", e.Erasure),
			Personal: erasedOf(e.Erasure, "dispatch_note"),
		}, nil
	case order.SettlementUpdated:
		return OrderSettlementUpdated, OrderSettlementUpdatedData{
			SettlementStatus: string(e.SettlementStatus), PaidAmountCents: e.PaidAmountCents,
			PaymentMethod: e.PaymentMethod, PaidAt: e.PaidAt, SettlementNote: text(e.SettlementNote, "settlement_note", e.Erasure),
			Personal: erasedOf(e.Erasure, "settlement_note"),
		}, nil
	case schedule.Created:
		return ScheduleCreated, ScheduleCreatedData{
			OrderID: e.OrderID, StaffID: e.StaffID, StartAt: e.StartAt, EndAt: e.EndAt, Notes: text(e.Notes, "notes", e.Erasure),
			Status: string(e.Status), Personal: erasedOf(e.Erasure, "notes"),
		}, nil
	case schedule.AssignmentUpdated:
		return ScheduleAssignmentUpdated, ScheduleAssignmentUpdatedData{StaffID: e.StaffID, StartAt: e.StartAt, EndAt: e.EndAt}, nil
	case schedule.StatusChanged:
		return ScheduleStatusChanged, StatusChangedData{From: string(e.From), To: string(e.To)}, nil
	case servicerequest.Created:
		return RequestCreated, RequestCreatedData{
			CustomerID: e.CustomerID, CatalogItemID: e.CatalogItemID, Content: text(e.Content, "content", e.Erasure),
			AppointmentStartAt: e.AppointmentStartAt, AppointmentEndAt: e.AppointmentEndAt,
			Source: e.Source, Notes: text(e.Notes, "notes", e.Erasure), Status: string(e.Status),
			Personal: erasedOf(e.Erasure, "content", "notes"),
		}, nil
	case servicerequest.DetailsUpdated:
		return RequestDetailsUpdated, RequestDetailsUpdatedData{
			CatalogItemID: e.CatalogItemID, Content: text(e.Content, "content", e.Erasure),
			AppointmentStartAt: e.AppointmentStartAt, AppointmentEndAt: e.AppointmentEndAt, Notes: text(e.Notes, "notes", e.Erasure),
			Personal: erasedOf(e.Erasure, "content", "notes"),
		}, nil
	case servicerequest.StatusChanged:
		return RequestStatusChanged, StatusChangedData{From: string(e.From), To: string(e.To)}, nil
	case servicerequest.Converted:
		return RequestConverted, RequestConvertedData{OrderID: e.OrderID}, nil
	case plan.Created:
		return PlanCreated, PlanCreatedData{CustomerID: e.CustomerID, CatalogItemID: e.CatalogItemID, TimeZone: e.TimeZone,
			Terms: planTermsData(e.Terms)}, nil
	case plan.Changed:
		return PlanChanged, PlanChangedData{From: e.From.String(), Terms: planTermsData(e.Terms)}, nil
	case plan.VisitSkipped:
		return PlanVisitSkipped, PlanVisitData{Date: e.Date.String()}, nil
	case plan.VisitMoved:
		return PlanVisitMoved, PlanVisitData{Date: e.Date.String(), ToDate: e.ToDate.String(), Start: e.ToStart.String()}, nil
	case plan.Paused:
		return PlanPaused, PlanAtData{At: event.Instant(e.At)}, nil
	case plan.Resumed:
		return PlanResumed, PlanAtData{At: event.Instant(e.At)}, nil
	case plan.Ended:
		return PlanEnded, PlanAtData{At: event.Instant(e.At)}, nil
	case event.Skipped:
		return agg + ".event_skipped", SkippedData{Of: e.Of}, nil
	case event.PersonalDataErased:
		return agg + ".personal_data_erased", PersonalDataErasedData{SubjectType: e.SubjectType, SubjectID: e.SubjectID}, nil
	case nil:
		return "", nil, fmt.Errorf("payload not decoded")
	default:
		return "", nil, fmt.Errorf("stored type %q has no public form", e.EventType())
	}
}

// Ping returns the ping event a webhook endpoint's test sends: a new id,
// the endpoint as its aggregate, no position.
func Ping(id, merchantID, endpointID string, at time.Time) Event {
	return Event{
		ID: id, Type: WebhookEndpointPinged, SchemaVersion: SchemaVersion, MerchantID: merchantID,
		AggregateType: AggregateWebhookEndpoint, AggregateID: endpointID, AggregateVersion: 1,
		OccurredAt: event.Instant(at), Data: PingData{Message: "Hearth test delivery"},
	}
}

// Marshal encodes e as delivered: compact JSON.
func Marshal(e Event) ([]byte, error) { return json.Marshal(e) }

// text is a personal field as published: null when it was erased.
func text(v, field string, e event.Erasure) *string {
	if e.Erased(field) {
		return nil
	}
	return &v
}

// erasedOf names which of fields were erased.
func erasedOf(e event.Erasure, fields ...string) Personal {
	var p Personal
	for _, f := range fields {
		if e.Erased(f) {
			p.Erased = append(p.Erased, f)
		}
	}
	return p
}

// WithoutPersonalData returns e with every personal field of its data null
// and named withheld: the copy the NATS relay publishes, so that the
// stream (which Hearth cannot rewrite in place) never holds personal data
// to erase. Receivers read such fields through the API or the feed.
func WithoutPersonalData(e Event) Event {
	// withhold nulls the fields and names them withheld (which covers
	// erased ones too).
	withhold := func(p *Personal, names []string, fields ...**string) {
		for _, f := range fields {
			*f = nil
		}
		*p = Personal{Withheld: names}
	}
	switch d := e.Data.(type) {
	case OrderCreatedData:
		withhold(&d.Personal, []string{"notes"}, &d.Notes)
		e.Data = d
	case OrderDetailsUpdatedData:
		withhold(&d.Personal, []string{"notes"}, &d.Notes)
		e.Data = d
	case OrderCancelledData:
		withhold(&d.Personal, []string{"reason"}, &d.Reason)
		e.Data = d
	case OrderAssignmentUpdatedData:
		withhold(&d.Personal, []string{"dispatch_note"}, &d.DispatchNote)
		e.Data = d
	case OrderSettlementUpdatedData:
		withhold(&d.Personal, []string{"settlement_note"}, &d.SettlementNote)
		e.Data = d
	case ScheduleCreatedData:
		withhold(&d.Personal, []string{"notes"}, &d.Notes)
		e.Data = d
	case RequestCreatedData:
		withhold(&d.Personal, []string{"content", "notes"}, &d.Content, &d.Notes)
		e.Data = d
	case RequestDetailsUpdatedData:
		withhold(&d.Personal, []string{"content", "notes"}, &d.Content, &d.Notes)
		e.Data = d
	}
	return e
}
