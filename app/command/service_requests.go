package command

import (
	"context"
	"errors"
	"fmt"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/servicerequest"
	"hearth/domain/uuid"
)

// CreateServiceRequest records what a customer asked for.
type CreateServiceRequest struct {
	Meta       event.Meta
	CustomerID string
	Source     string
	Details    servicerequest.Details
}

// RequestTarget says which request a command changes and, optionally, the
// version the client read.
type RequestTarget struct {
	Meta            event.Meta
	RequestID       string
	ExpectedVersion *int
}

// UpdateServiceRequest changes a request's details. Nil fields keep their
// value.
type UpdateServiceRequest struct {
	RequestTarget
	CatalogItemID      *string
	Content            *string
	AppointmentStartAt *time.Time
	AppointmentEndAt   *time.Time
	Notes              *string
	// ClearAppointmentStartAt and ClearAppointmentEndAt take the
	// appointment's start or end off (the client sent null): an appointment
	// is optional, and one given may have to be arranged again.
	ClearAppointmentStartAt, ClearAppointmentEndAt bool
}

// ChangeServiceRequestStatus confirms or cancels a request.
type ChangeServiceRequestStatus struct {
	RequestTarget
	Status string
}

// ServiceRequestHandlers handles the service-request commands.
type ServiceRequestHandlers struct {
	tx Transactor
}

// NewServiceRequestHandlers checks its dependency.
func NewServiceRequestHandlers(tx Transactor) (ServiceRequestHandlers, error) {
	if tx == nil {
		return ServiceRequestHandlers{}, errors.New("command.NewServiceRequestHandlers: nil transactor")
	}
	return ServiceRequestHandlers{tx: tx}, nil
}

func checkCatalogItem(ctx context.Context, s Session, id string) error {
	if id == "" {
		return nil
	}
	if !uuid.Valid(id) {
		return apperr.Invalid("catalog_item_id", "must be a UUID")
	}
	_, _, found, err := s.CatalogItem(ctx, id)
	if err != nil {
		return err
	}
	if !found {
		return apperr.Invalid("catalog_item_id", "no catalog item %s in this merchant", id)
	}
	return nil
}

// Create handles CreateServiceRequest.
func (h ServiceRequestHandlers) Create(ctx context.Context, cmd CreateServiceRequest) (Written, error) {
	r, err := servicerequest.New(uuid.New(), cmd.CustomerID, cmd.Source, cmd.Details)
	if err != nil {
		return Written{}, err
	}
	out, err := h.tx.Run(ctx, cmd.Meta, func(ctx context.Context, s Session) error {
		if _, err := checkCustomer(ctx, s, cmd.CustomerID); err != nil {
			return err
		}
		if err := checkCatalogItem(ctx, s, cmd.Details.CatalogItemID); err != nil {
			return err
		}
		s.AddServiceRequest(r)
		return nil
	})
	return out.Of(r.ID()), err
}

// update runs fn on the target request in one transaction; the edits it
// decides must leave the request within servicerequest.MaxEvents
// (CheckGrowth).
func (h ServiceRequestHandlers) update(ctx context.Context, t RequestTarget, fn func(ctx context.Context, s Session, r *servicerequest.Request) error) (Outcome, error) {
	return h.tx.Run(ctx, t.Meta, func(ctx context.Context, s Session) error {
		r, err := s.ServiceRequest(ctx, t.RequestID)
		if err != nil {
			return err
		}
		if err := checkVersion("service request", t.RequestID, t.ExpectedVersion, r.Version()); err != nil {
			return err
		}
		if err := fn(ctx, s, r); err != nil {
			return err
		}
		return r.CheckGrowth()
	})
}

// UpdateDetails handles UpdateServiceRequest.
func (h ServiceRequestHandlers) UpdateDetails(ctx context.Context, cmd UpdateServiceRequest) (Written, error) {
	out, err := h.update(ctx, cmd.RequestTarget, func(ctx context.Context, s Session, r *servicerequest.Request) error {
		d := r.Details()
		if cmd.CatalogItemID != nil && *cmd.CatalogItemID != d.CatalogItemID {
			if err := checkCatalogItem(ctx, s, *cmd.CatalogItemID); err != nil {
				return err
			}
			d.CatalogItemID = *cmd.CatalogItemID
		}
		if cmd.Content != nil {
			d.Content = *cmd.Content
		}
		if cmd.AppointmentStartAt != nil || cmd.ClearAppointmentStartAt {
			d.AppointmentStartAt = cmd.AppointmentStartAt
		}
		if cmd.AppointmentEndAt != nil || cmd.ClearAppointmentEndAt {
			d.AppointmentEndAt = cmd.AppointmentEndAt
		}
		if cmd.Notes != nil {
			d.Notes = *cmd.Notes
		}
		return r.UpdateDetails(d)
	})
	return out.Of(cmd.RequestID), err
}

// ChangeStatus handles ChangeServiceRequestStatus.
func (h ServiceRequestHandlers) ChangeStatus(ctx context.Context, cmd ChangeServiceRequestStatus) (Written, error) {
	to, ok := servicerequest.ParseStatus(cmd.Status)
	if !ok {
		return Written{}, apperr.Invalid("status", "must be one of new, confirmed, converted, cancelled")
	}
	out, err := h.update(ctx, cmd.RequestTarget, func(ctx context.Context, s Session, r *servicerequest.Request) error {
		return r.ChangeStatus(to)
	})
	return out.Of(cmd.RequestID), err
}

// Convert turns a confirmed request into an order, a flow in one
// transaction: OrderCreated (customer and appointment window copied; amount
// is the catalog item's base price, or 0) and ServiceRequestConverted. Two
// conversions of one request can never both succeed: both append to the
// request's stream, so one of them conflicts. It returns the order.
func (h ServiceRequestHandlers) Convert(ctx context.Context, t RequestTarget) (Written, error) {
	orderID := uuid.New()
	out, err := h.update(ctx, t, func(ctx context.Context, s Session, r *servicerequest.Request) error {
		if err := r.Convert(orderID); err != nil {
			return err
		}
		d := r.Details()
		var amount int64
		if d.CatalogItemID != "" {
			price, _, found, err := s.CatalogItem(ctx, d.CatalogItemID)
			if err != nil {
				return err
			}
			if found {
				amount = price
			}
		}
		in := order.NewOrder{ID: orderID, RequestID: r.ID(), CustomerID: r.CustomerID(), AmountCents: amount, Notes: d.Notes}
		if d.AppointmentStartAt != nil && d.AppointmentEndAt != nil {
			in.ScheduledStartAt, in.ScheduledEndAt = d.AppointmentStartAt, d.AppointmentEndAt
		}
		o, err := order.New(in)
		if err != nil {
			return fmt.Errorf("convert request %s: %w", r.ID(), err)
		}
		s.AddOrder(o)
		return nil
	})
	return out.Of(orderID), err
}
