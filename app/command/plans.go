package command

import (
	"context"
	"errors"
	"fmt"

	"hearth/domain/apperr"
	"hearth/domain/civil"
	"hearth/domain/event"
	"hearth/domain/plan"
	"hearth/domain/uuid"
)

// CreatePlan creates a service plan for an existing customer and catalog
// item, in the merchant's time zone.
type CreatePlan struct {
	Meta          event.Meta
	CustomerID    string
	CatalogItemID string
	// PriceCents is the price of a visit; nil: the catalog item's base
	// price.
	PriceCents *int64
	// StaffID is the preferred staff member, if any.
	StaffID    string
	Window     plan.Window
	Recurrence plan.Recurrence
}

// PlanTarget says which plan a command changes and, optionally, the
// version the client read.
type PlanTarget struct {
	Meta            event.Meta
	PlanID          string
	ExpectedVersion *int
}

// ChangePlan gives a plan new terms from its visit dated From on. Nil
// fields keep the plan's current terms.
type ChangePlan struct {
	PlanTarget
	From       civil.Date
	PriceCents *int64
	StaffID    *string // "" drops the preferred staff member
	Window     *plan.Window
	Recurrence *plan.Recurrence
}

// SkipVisit drops the plan's visit dated Date.
type SkipVisit struct {
	PlanTarget
	Date civil.Date
}

// MoveVisit moves the plan's visit dated Date to start at Start on ToDate.
type MoveVisit struct {
	PlanTarget
	Date   civil.Date
	ToDate civil.Date
	Start  civil.Clock
}

// PlanHandlers handles the service-plan commands.
type PlanHandlers struct {
	tx Transactor
}

// NewPlanHandlers checks its dependency.
func NewPlanHandlers(tx Transactor) (PlanHandlers, error) {
	if tx == nil {
		return PlanHandlers{}, errors.New("command.NewPlanHandlers: nil transactor")
	}
	return PlanHandlers{tx: tx}, nil
}

// Create handles CreatePlan: the customer, the catalog item and the staff
// member are checked in the transaction that appends ServicePlanCreated.
func (h PlanHandlers) Create(ctx context.Context, cmd CreatePlan) (Written, error) {
	id := uuid.New()
	out, err := h.tx.Run(ctx, cmd.Meta, func(ctx context.Context, s Session) error {
		tz, err := s.MerchantTimeZone(ctx)
		if err != nil {
			return err
		}
		terms := plan.Terms{StaffID: cmd.StaffID, Window: cmd.Window, Recurrence: cmd.Recurrence}
		price, refErr := refsOfPlan(ctx, s, cmd.CustomerID, cmd.CatalogItemID, cmd.StaffID)
		terms.PriceCents = price
		if cmd.PriceCents != nil {
			terms.PriceCents = *cmd.PriceCents
		}
		p, err := plan.New(plan.NewPlan{ID: id, CustomerID: cmd.CustomerID, CatalogItemID: cmd.CatalogItemID,
			TimeZone: tz, Terms: terms}, cmd.Meta.OccurredAt)
		// Every bad field at once: the references' and the plan's own.
		if err := joinFields(refErr, err); err != nil {
			return err
		}
		// Checked again with the commit, which waits for an erasure of the
		// customer under way and then finds them erased: a plan committed
		// after the erasure read the customer's plans would never be ended.
		s.RequireCustomer(cmd.CustomerID)
		s.AddServicePlan(p)
		return nil
	})
	return out.Of(id), err
}

// refsOfPlan checks that the references of a plan exist in the merchant
// and returns the catalog item's base price. Missing and malformed ids are
// the plan's own checks (plan.New).
func refsOfPlan(ctx context.Context, s Session, customerID, catalogItemID, staffID string) (int64, error) {
	var errs apperr.Fields
	var price int64
	if uuid.Valid(customerID) {
		if _, found, err := s.Customer(ctx, customerID); err != nil {
			return 0, err
		} else if !found {
			errs.Add("customer_id", "no customer %s in this merchant", customerID)
		} else if erased, err := s.CustomerErased(ctx, customerID); err != nil {
			return 0, err
		} else if erased {
			// Its visits could never be generated (an order holds personal
			// data, and an erased customer has no key to seal it with).
			return 0, &apperr.ConflictError{Detail: fmt.Sprintf("customer %s was erased: no service plan can be made for them", customerID)}
		}
	}
	if uuid.Valid(catalogItemID) {
		p, _, found, err := s.CatalogItem(ctx, catalogItemID)
		if err != nil {
			return 0, err
		} else if !found {
			errs.Add("catalog_item_id", "no catalog item %s in this merchant", catalogItemID)
		}
		price = p
	}
	if err := checkStaff(ctx, s, staffID, &errs); err != nil {
		return 0, err
	}
	return price, errs.Err()
}

// checkStaff checks that an optional preferred staff member exists and is
// active.
func checkStaff(ctx context.Context, s Session, staffID string, errs *apperr.Fields) error {
	if !uuid.Valid(staffID) {
		return nil // none, or the terms' own check names it
	}
	exists, active, err := s.StaffActive(ctx, staffID)
	switch {
	case err != nil:
		return err
	case !exists:
		errs.Add("staff_id", "no staff member %s in this merchant", staffID)
	case !active:
		errs.Add("staff_id", "staff member %s is not active", staffID)
	}
	return nil
}

// update runs fn on the target plan in one transaction.
func (h PlanHandlers) update(ctx context.Context, t PlanTarget, fn func(ctx context.Context, s Session, p *plan.Plan) error) (Written, error) {
	out, err := h.tx.Run(ctx, t.Meta, func(ctx context.Context, s Session) error {
		p, err := s.ServicePlan(ctx, t.PlanID)
		if err != nil {
			return err
		}
		if err := checkVersion("service_plan", t.PlanID, t.ExpectedVersion, p.Version()); err != nil {
			return err
		}
		return fn(ctx, s, p)
	})
	return out.Of(t.PlanID), err
}

// Change handles ChangePlan.
func (h PlanHandlers) Change(ctx context.Context, cmd ChangePlan) (Written, error) {
	if err := requiredDate("from", cmd.From); err != nil {
		return Written{}, err
	}
	return h.update(ctx, cmd.PlanTarget, func(ctx context.Context, s Session, p *plan.Plan) error {
		t := p.Terms()
		if cmd.PriceCents != nil {
			t.PriceCents = *cmd.PriceCents
		}
		if cmd.StaffID != nil && *cmd.StaffID != t.StaffID {
			var errs apperr.Fields
			if err := checkStaff(ctx, s, *cmd.StaffID, &errs); err != nil {
				return err
			}
			if err := errs.Err(); err != nil {
				return err
			}
			t.StaffID = *cmd.StaffID
		}
		if cmd.Window != nil {
			t.Window = *cmd.Window
		}
		if cmd.Recurrence != nil {
			t.Recurrence = *cmd.Recurrence
		}
		return p.ChangeFrom(cmd.From, t, cmd.Meta.OccurredAt)
	})
}

// Skip handles SkipVisit.
func (h PlanHandlers) Skip(ctx context.Context, cmd SkipVisit) (Written, error) {
	if err := requiredDate("date", cmd.Date); err != nil {
		return Written{}, err
	}
	return h.update(ctx, cmd.PlanTarget, func(_ context.Context, _ Session, p *plan.Plan) error {
		return p.Skip(cmd.Date, cmd.Meta.OccurredAt)
	})
}

// Move handles MoveVisit.
func (h PlanHandlers) Move(ctx context.Context, cmd MoveVisit) (Written, error) {
	if err := requiredDate("date", cmd.Date); err != nil {
		return Written{}, err
	}
	return h.update(ctx, cmd.PlanTarget, func(_ context.Context, _ Session, p *plan.Plan) error {
		return p.Move(cmd.Date, cmd.ToDate, cmd.Start, cmd.Meta.OccurredAt)
	})
}

// Pause pauses the plan.
func (h PlanHandlers) Pause(ctx context.Context, t PlanTarget) (Written, error) {
	return h.update(ctx, t, func(_ context.Context, _ Session, p *plan.Plan) error { return p.Pause(t.Meta.OccurredAt) })
}

// Resume resumes the plan.
func (h PlanHandlers) Resume(ctx context.Context, t PlanTarget) (Written, error) {
	return h.update(ctx, t, func(_ context.Context, _ Session, p *plan.Plan) error { return p.Resume(t.Meta.OccurredAt) })
}

// End ends the plan.
func (h PlanHandlers) End(ctx context.Context, t PlanTarget) (Written, error) {
	return h.update(ctx, t, func(_ context.Context, _ Session, p *plan.Plan) error { return p.End(t.Meta.OccurredAt) })
}

func requiredDate(field string, d civil.Date) error {
	if d.IsZero() {
		return apperr.Invalid(field, "is required")
	}
	if !d.Valid() {
		return apperr.Invalid(field, "is not a date")
	}
	return nil
}

// joinFields joins validation errors into one naming all their fields;
// any other error wins as it is.
func joinFields(errs ...error) error {
	var all apperr.Fields
	for _, err := range errs {
		var v *apperr.ValidationError
		switch {
		case err == nil:
		case errors.As(err, &v):
			all = append(all, v.Fields...)
		default:
			return err
		}
	}
	return all.Err()
}
