package query

import (
	"fmt"
	"time"

	"hearth/domain/event"
	"hearth/domain/schedule"
	"hearth/domain/servicerequest"
)

// ServiceRequest is the read model of one service request. Its JSON is the
// stored format of the change log's snapshots, as Order's is.
type ServiceRequest struct {
	ID                 string     `json:"id"`
	MerchantID         string     `json:"-"`
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
	// Erased names the personal fields that read as erased (empty): their
	// data subject was erased. Empty otherwise.
	Erased []string `json:"erased,omitempty"`
}

// Apply folds one service-request event into the view.
func (v *ServiceRequest) Apply(r event.Recorded) error {
	at := r.OccurredAt.UTC()
	optional := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	switch e := r.Event.(type) {
	case servicerequest.Created:
		*v = ServiceRequest{ID: e.RequestID, MerchantID: r.MerchantID, CustomerID: e.CustomerID,
			CatalogItemID: optional(e.CatalogItemID), Content: e.Content,
			AppointmentStartAt: e.AppointmentStartAt, AppointmentEndAt: e.AppointmentEndAt,
			Status: string(e.Status), Source: e.Source, Notes: e.Notes, CreatedAt: at}
		markErased(&v.Erased, "content", e.Erased("content"))
		markErased(&v.Erased, "notes", e.Erased("notes"))
	case servicerequest.DetailsUpdated:
		v.CatalogItemID, v.Content, v.Notes = optional(e.CatalogItemID), e.Content, e.Notes
		v.AppointmentStartAt, v.AppointmentEndAt = e.AppointmentStartAt, e.AppointmentEndAt
		markErased(&v.Erased, "content", e.Erased("content"))
		markErased(&v.Erased, "notes", e.Erased("notes"))
	case servicerequest.StatusChanged:
		v.Status = string(e.To)
	case servicerequest.Converted:
		v.Status, v.OrderID = string(servicerequest.StatusConverted), optional(e.OrderID)
	case event.Skipped, event.PersonalDataErased: // a version bump only (see markErased)
	default:
		return fmt.Errorf("service request view: unexpected event %T", r.Event)
	}
	if v.ID == "" {
		return fmt.Errorf("service request view: %s %s before ServiceRequestCreated", r.Type, r.ID)
	}
	v.UpdatedAt, v.Version = at, r.Version
	return nil
}

// Schedule is the read model of one schedule. Its JSON is the stored format
// of the change log's snapshots, as Order's is.
type Schedule struct {
	ID         string    `json:"id"`
	MerchantID string    `json:"-"`
	OrderID    string    `json:"order_id"`
	StaffID    string    `json:"staff_id"`
	StaffName  string    `json:"staff_name,omitempty"`
	StartAt    time.Time `json:"start_at"`
	EndAt      time.Time `json:"end_at"`
	Status     string    `json:"status"`
	Notes      string    `json:"notes"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	Version    int       `json:"version"`
	// Erased names the personal fields that read as erased (empty): their
	// data subject was erased. Empty otherwise.
	Erased []string `json:"erased,omitempty"`
}

// Apply folds one schedule event into the view.
func (v *Schedule) Apply(r event.Recorded) error {
	at := r.OccurredAt.UTC()
	switch e := r.Event.(type) {
	case schedule.Created:
		*v = Schedule{ID: e.ScheduleID, MerchantID: r.MerchantID, OrderID: e.OrderID, StaffID: e.StaffID,
			StartAt: e.StartAt, EndAt: e.EndAt, Status: string(e.Status), Notes: e.Notes, CreatedAt: at}
		markErased(&v.Erased, "notes", e.Erased("notes"))
	case schedule.AssignmentUpdated:
		v.StaffID, v.StartAt, v.EndAt = e.StaffID, e.StartAt, e.EndAt
	case schedule.StatusChanged:
		v.Status = string(e.To)
	case event.Skipped, event.PersonalDataErased: // a version bump only (see markErased)
	default:
		return fmt.Errorf("schedule view: unexpected event %T", r.Event)
	}
	if v.ID == "" {
		return fmt.Errorf("schedule view: %s %s before ScheduleCreated", r.Type, r.ID)
	}
	v.UpdatedAt, v.Version = at, r.Version
	return nil
}

// Fold builds a view from a whole stream.
func Fold[V any, P interface {
	*V
	Apply(event.Recorded) error
}](stream []event.Recorded) (V, error) {
	var v V
	for _, r := range stream {
		if err := P(&v).Apply(r); err != nil {
			return v, err
		}
	}
	return v, nil
}
