package httpport

import (
	"net/http"

	"hearth/app/access"
	"hearth/app/command"
	"hearth/app/order"
	"hearth/app/query"
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

type updateOrderInput struct {
	ExpectedVersion *int    `json:"expected_version"`
	CustomerID      *string `json:"customer_id"`
	AmountCents     *int64  `json:"amount_cents"`
	Notes           *string `json:"notes" text:"multiline"`
}

func (s *server) updateOrder(w http.ResponseWriter, r *http.Request) error {
	var in updateOrderInput
	if err := decode(r, &in); err != nil {
		return err
	}
	t, err := s.target(r, in.ExpectedVersion)
	if err != nil {
		return err
	}
	how := s.orderAnswer(r, http.StatusOK)
	written, err := s.App.Commands.Orders.UpdateDetails(how.seal(r), command.UpdateOrderDetails{
		OrderTarget: t, CustomerID: in.CustomerID, AmountCents: in.AmountCents, Notes: in.Notes,
	})
	if err != nil {
		return err
	}
	return how.reply(w, r, written)
}

type statusInput struct {
	ExpectedVersion *int   `json:"expected_version"`
	Status          string `json:"status"`
}

func (s *server) changeOrderStatus(w http.ResponseWriter, r *http.Request) error {
	var in statusInput
	if err := decode(r, &in); err != nil {
		return err
	}
	t, err := s.target(r, in.ExpectedVersion)
	if err != nil {
		return err
	}
	how := s.orderAnswer(r, http.StatusOK)
	written, err := s.App.Commands.Orders.ChangeStatus(how.seal(r), command.ChangeOrderStatus{OrderTarget: t, Status: in.Status})
	if err != nil {
		return err
	}
	return how.reply(w, r, written)
}

type cancelInput struct {
	ExpectedVersion *int   `json:"expected_version"`
	Reason          string `json:"reason" text:"multiline"`
}

func (s *server) cancelOrder(w http.ResponseWriter, r *http.Request) error {
	var in cancelInput
	if err := decode(r, &in); err != nil {
		return err
	}
	t, err := s.target(r, in.ExpectedVersion)
	if err != nil {
		return err
	}
	how := s.orderAnswer(r, http.StatusOK)
	written, err := s.App.Commands.Orders.Cancel(how.seal(r), command.CancelOrder{OrderTarget: t, Reason: in.Reason})
	if err != nil {
		return err
	}
	return how.reply(w, r, written)
}

type assignmentInput struct {
	ExpectedVersion *int    `json:"expected_version"`
	StaffID         string  `json:"staff_id"`
	StartAt         *string `json:"start_at"`
	EndAt           *string `json:"end_at"`
	DispatchNote    string  `json:"dispatch_note" text:"multiline"`
}

func (s *server) assignOrder(w http.ResponseWriter, r *http.Request) error {
	var in assignmentInput
	if err := decode(r, &in); err != nil {
		return err
	}
	start, err := parseTime("start_at", in.StartAt)
	if err != nil {
		return err
	}
	end, err := parseTime("end_at", in.EndAt)
	if err != nil {
		return err
	}
	t, err := s.target(r, in.ExpectedVersion)
	if err != nil {
		return err
	}
	cmd := command.AssignOrder{OrderTarget: t, StaffID: in.StaffID, DispatchNote: in.DispatchNote}
	if start != nil {
		cmd.StartAt = *start
	}
	if end != nil {
		cmd.EndAt = *end
	}
	how := s.orderAnswer(r, http.StatusOK)
	written, err := s.App.Commands.Orders.Assign(how.seal(r), cmd)
	if err != nil {
		return err
	}
	return how.reply(w, r, written)
}

type settlementInput struct {
	ExpectedVersion  *int    `json:"expected_version"`
	SettlementStatus string  `json:"settlement_status"`
	PaidAmountCents  int64   `json:"paid_amount_cents"`
	PaymentMethod    string  `json:"payment_method"`
	PaidAt           *string `json:"paid_at"`
	SettlementNote   string  `json:"settlement_note" text:"multiline"`
}

func (s *server) settleOrder(w http.ResponseWriter, r *http.Request) error {
	var in settlementInput
	if err := decode(r, &in); err != nil {
		return err
	}
	paidAt, err := parseTime("paid_at", in.PaidAt)
	if err != nil {
		return err
	}
	t, err := s.target(r, in.ExpectedVersion)
	if err != nil {
		return err
	}
	how := s.orderAnswer(r, http.StatusOK)
	written, err := s.App.Commands.Orders.Settle(how.seal(r), command.SettleOrder{
		OrderTarget: t, SettlementStatus: in.SettlementStatus, PaidAmountCents: in.PaidAmountCents,
		PaymentMethod: in.PaymentMethod, PaidAt: paidAt, SettlementNote: in.SettlementNote,
	})
	if err != nil {
		return err
	}
	return how.reply(w, r, written)
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
		From:       p.time("from"),
		To:         p.time("to"),
	}
	if ss := p.oneOf("settlement_status", []string{string(order.Unsettled), string(order.Settled)}); len(ss) > 0 {
		f.SettlementStatus = ss[len(ss)-1]
	}
	page := p.page()
	if p.err != nil {
		return p.err
	}
	list, err := s.App.Queries.Orders.List(r.Context(), scope(r), f, page)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, listBodyOf(list, orderBodyOf))
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
