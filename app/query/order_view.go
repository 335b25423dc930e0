// Package query answers reads from the read models. Each query declares the
// read-model interface it needs; adapters/readmodel implements them.
package query

import (
	"fmt"
	"slices"
	"time"

	"hearth/domain/event"
	"hearth/domain/order"
)

// Order is the read model of one order. Its JSON is the stored format of
// the change log's before/after snapshots (adapters/readmodel), not the
// API's: ports/http maps it to its own response type.
type Order struct {
	ID                 string     `json:"id"`
	MerchantID         string     `json:"-"`
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
	// Erased names the personal fields that read as erased (empty): their
	// data subject was erased. Empty otherwise.
	Erased []string `json:"erased,omitempty"`
}

// Apply folds one order event into the view. It does not check versions:
// the projection does that before calling it. The same fold serves the
// projection, write responses and verification, so they cannot disagree.
func (o *Order) Apply(r event.Recorded) error {
	at := r.OccurredAt.UTC()
	switch e := r.Event.(type) {
	case order.Created:
		*o = Order{
			ID: e.OrderID, MerchantID: r.MerchantID, CustomerID: e.CustomerID,
			AmountCents: e.AmountCents, Status: string(e.Status), Notes: e.Notes,
			ScheduledStartAt: e.ScheduledStartAt, ScheduledEndAt: e.ScheduledEndAt,
			SettlementStatus: string(order.Unsettled), CreatedAt: at,
		}
		if e.RequestID != "" {
			o.RequestID = &e.RequestID
		}
		markErased(&o.Erased, "notes", e.Erased("notes"))
	case order.DetailsUpdated:
		o.CustomerID, o.AmountCents, o.Notes = e.CustomerID, e.AmountCents, e.Notes
		markErased(&o.Erased, "notes", e.Erased("notes"))
	case order.StatusChanged:
		o.Status = string(e.To)
		if e.CompletedAt != nil {
			o.CompletedAt = e.CompletedAt
		}
	case order.Cancelled:
		o.Status, o.CancellationReason = string(order.StatusCancelled), e.Reason
		markErased(&o.Erased, "cancellation_reason", e.Erased("reason"))
	case order.AssignmentUpdated:
		o.StaffID = nil
		if e.StaffID != "" {
			o.StaffID = &e.StaffID
		}
		if e.StartAt != nil {
			o.ScheduledStartAt, o.ScheduledEndAt = e.StartAt, e.EndAt
		}
		o.DispatchNote = e.DispatchNote
		markErased(&o.Erased, "dispatch_note", e.Erased("dispatch_note"))
	case order.SettlementUpdated:
		o.SettlementStatus, o.PaidAmountCents = string(e.SettlementStatus), e.PaidAmountCents
		o.PaymentMethod, o.PaidAt, o.SettlementNote = e.PaymentMethod, e.PaidAt, e.SettlementNote
		markErased(&o.Erased, "settlement_note", e.Erased("settlement_note"))
	case event.Skipped, event.PersonalDataErased: // a version bump only (see erasedStep)
	default:
		return fmt.Errorf("order view: unexpected event %T", r.Event)
	}
	if o.ID == "" {
		return fmt.Errorf("order view: %s %s before OrderCreated", r.Type, r.ID)
	}
	o.UpdatedAt, o.Version = at, r.Version
	return nil
}

// markErased keeps a view's list of erased fields (by API name) in step with
// the event that last wrote field: an event whose subject was erased adds
// it, a later readable one removes it. A PersonalDataErased event itself
// changes no field: the read models re-fold the stream before it, whose
// events then read as erased (adapters/readmodel).
func markErased(list *[]string, field string, erased bool) {
	i := slices.Index(*list, field)
	switch {
	case erased && i < 0: // a copy: views are copied by value
		*list = append(slices.Clone(*list), field)
		slices.Sort(*list)
	case !erased && i >= 0:
		*list = slices.Delete(slices.Clone(*list), i, i+1)
		if len(*list) == 0 {
			*list = nil
		}
	}
}

// FoldOrder builds the view from a whole stream.
func FoldOrder(stream []event.Recorded) (Order, error) { return Fold[Order](stream) }

// Change is one change-log row: what one event did to a row.
type Change struct {
	EventID       string
	AggregateType string
	AggregateID   string
	Version       int
	Action        string
	Actor         string
	Before        any
	After         any
	OccurredAt    time.Time
}
