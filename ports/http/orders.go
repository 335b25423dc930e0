package httpport

import (
	"context"
	"net/http"

	"hearth/app/access"
	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/order"
)

func scope(r *http.Request) query.Scope {
	p := principal(r)
	sc := query.Scope{MerchantID: p.MerchantID}
	if p.Role == access.Worker {
		sc.StaffID = p.StaffID
	}
	return sc
}

type createOrderInput struct {
	RequestID        string  `json:"request_id"`
	CustomerID       string  `json:"customer_id"`
	AmountCents      int64   `json:"amount_cents"`
	Notes            string  `json:"notes" text:"multiline"`
	ScheduledStartAt *string `json:"scheduled_start_at"`
	ScheduledEndAt   *string `json:"scheduled_end_at"`
}

func (s *server) createOrder(w http.ResponseWriter, r *http.Request) error {
	var in createOrderInput
	if err := decode(r, &in); err != nil {
		return err
	}
	start, err := parseTime("scheduled_start_at", in.ScheduledStartAt)
	if err != nil {
		return err
	}
	end, err := parseTime("scheduled_end_at", in.ScheduledEndAt)
	if err != nil {
		return err
	}
	how := s.orderAnswer(r, http.StatusCreated)
	written, err := s.App.Commands.Orders.Create(how.seal(r), command.CreateOrder{
		Meta: s.meta(r), RequestID: in.RequestID, CustomerID: in.CustomerID, AmountCents: in.AmountCents,
		Notes: in.Notes, ScheduledStartAt: start, ScheduledEndAt: end,
	})
	if err != nil {
		return err
	}
	return how.reply(w, r, written)
}

// target reads the order id from the path and the version the client
// read, from If-Match or the body's expected_version.
func (s *server) target(r *http.Request, fromBody *int) (command.OrderTarget, error) {
	id, err := pathID(r)
	if err != nil {
		return command.OrderTarget{}, err
	}
	expected, err := expectedVersion(r, fromBody)
	if err != nil {
		return command.OrderTarget{}, err
	}
	return command.OrderTarget{Meta: s.meta(r), OrderID: id, ExpectedVersion: expected}, nil
}

// versionedInput is a body that may state the version it read.
type versionedInput interface{ expected() *int }

// changeOrder handles a write to the path's order: it decodes the body into
// In, runs the command run makes of it, and answers with the order.
func changeOrder[In versionedInput](s *server, w http.ResponseWriter, r *http.Request,
	run func(ctx context.Context, t command.OrderTarget, in In) (command.Written, error)) error {
	var in In
	if err := decode(r, &in); err != nil {
		return err
	}
	t, err := s.target(r, in.expected())
	if err != nil {
		return err
	}
	how := s.orderAnswer(r, http.StatusOK)
	written, err := run(how.seal(r), t, in)
	if err != nil {
		return err
	}
	return how.reply(w, r, written)
}

type updateOrderInput struct {
	ExpectedVersion *int    `json:"expected_version"`
	CustomerID      *string `json:"customer_id"`
	AmountCents     *int64  `json:"amount_cents"`
	Notes           *string `json:"notes" text:"multiline"`
}

func (in updateOrderInput) expected() *int { return in.ExpectedVersion }

func (s *server) updateOrder(w http.ResponseWriter, r *http.Request) error {
	return changeOrder(s, w, r, func(ctx context.Context, t command.OrderTarget, in updateOrderInput) (command.Written, error) {
		return s.App.Commands.Orders.UpdateDetails(ctx, command.UpdateOrderDetails{
			OrderTarget: t, CustomerID: in.CustomerID, AmountCents: in.AmountCents, Notes: in.Notes,
		})
	})
}

type statusInput struct {
	ExpectedVersion *int   `json:"expected_version"`
	Status          string `json:"status"`
}

func (in statusInput) expected() *int { return in.ExpectedVersion }

func (s *server) changeOrderStatus(w http.ResponseWriter, r *http.Request) error {
	return changeOrder(s, w, r, func(ctx context.Context, t command.OrderTarget, in statusInput) (command.Written, error) {
		return s.App.Commands.Orders.ChangeStatus(ctx, command.ChangeOrderStatus{OrderTarget: t, Status: in.Status})
	})
}

type cancelInput struct {
	ExpectedVersion *int   `json:"expected_version"`
	Reason          string `json:"reason" text:"multiline"`
}

func (in cancelInput) expected() *int { return in.ExpectedVersion }

func (s *server) cancelOrder(w http.ResponseWriter, r *http.Request) error {
	return changeOrder(s, w, r, func(ctx context.Context, t command.OrderTarget, in cancelInput) (command.Written, error) {
		return s.App.Commands.Orders.Cancel(ctx, command.CancelOrder{OrderTarget: t, Reason: in.Reason})
	})
}

type assignmentInput struct {
	ExpectedVersion *int    `json:"expected_version"`
	StaffID         string  `json:"staff_id"`
	StartAt         *string `json:"start_at"`
	EndAt           *string `json:"end_at"`
	DispatchNote    string  `json:"dispatch_note" text:"multiline"`
}

func (in assignmentInput) expected() *int { return in.ExpectedVersion }

func (s *server) assignOrder(w http.ResponseWriter, r *http.Request) error {
	return changeOrder(s, w, r, func(ctx context.Context, t command.OrderTarget, in assignmentInput) (command.Written, error) {
		start, err := parseTime("start_at", in.StartAt)
		if err != nil {
			return command.Written{}, err
		}
		end, err := parseTime("end_at", in.EndAt)
		if err != nil {
			return command.Written{}, err
		}
		cmd := command.AssignOrder{OrderTarget: t, StaffID: in.StaffID, DispatchNote: in.DispatchNote}
		if start != nil {
			cmd.StartAt = *start
		}
		if end != nil {
			cmd.EndAt = *end
		}
		return s.App.Commands.Orders.Assign(ctx, cmd)
	})
}

type settlementInput struct {
	ExpectedVersion  *int    `json:"expected_version"`
	SettlementStatus string  `json:"settlement_status"`
	PaidAmountCents  int64   `json:"paid_amount_cents"`
	PaymentMethod    string  `json:"payment_method"`
	PaidAt           *string `json:"paid_at"`
	SettlementNote   string  `json:"settlement_note" text:"multiline"`
}

func (in settlementInput) expected() *int { return in.ExpectedVersion }

func (s *server) settleOrder(w http.ResponseWriter, r *http.Request) error {
	return changeOrder(s, w, r, func(ctx context.Context, t command.OrderTarget, in settlementInput) (command.Written, error) {
		paidAt, err := parseTime("paid_at", in.PaidAt)
		if err != nil {
			return command.Written{}, err
		}
		return s.App.Commands.Orders.Settle(ctx, command.SettleOrder{
			OrderTarget: t, SettlementStatus: in.SettlementStatus, PaidAmountCents: in.PaidAmountCents,
			PaymentMethod: in.PaymentMethod, PaidAt: paidAt, SettlementNote: in.SettlementNote,
		})
	})
}

func (s *server) getOrder(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	o, err := s.App.Queries.Orders.Get(r.Context(), scope(r), id)
	if err != nil {
		return err
	}
	if notModified(w, r, o.Version) {
		return nil
	}
	writeJSON(w, http.StatusOK, orderBodyOf(o))
	return nil
}

func (s *server) listOrders(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	statuses := make([]string, len(order.Statuses))
	for i, st := range order.Statuses {
		statuses[i] = string(st)
	}
	f := query.OrderFilter{
		Statuses:   p.oneOf("status", statuses),
		CustomerID: p.uuid("customer_id"),
		StaffID:    p.uuid("staff_id"),
	}
	f.From, f.To = p.timeRange()
	p.oneOf("settlement_status", []string{string(order.Unsettled), string(order.Settled)})
	f.SettlementStatus = p.one("settlement_status")
	page := p.listPage()
	if p.err != nil {
		return p.err
	}
	list, err := s.App.Queries.Orders.List(r.Context(), scope(r), f, page)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, listBodyOf(nextOf(p, list), orderBodyOf))
	return nil
}

func (s *server) orderChanges(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	changes, err := s.App.Queries.Orders.Changes(r.Context(), scope(r), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": mapAll(changes, changeBodyOf)})
	return nil
}
