package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"hearth/app/command"
	"hearth/app/ops"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/order"
	"hearth/domain/schedule"
	"hearth/domain/text"
	"hearth/domain/uuid"
	"hearth/internal/aggregates"
)

type ordersData struct {
	Items              []query.Order
	Pager              pager
	Statuses           []choice
	Settlement         string
	CustomerID, Staff  string
	From, To, Q        string
	Customers, StaffOf []option
	Matches            []option // customers whose name matches q
	SearchNote         string
}

func (c *Console) orders(w http.ResponseWriter, r *http.Request, s *session) error {
	q := r.URL.Query().Get("q")
	if id, ok := uuid.Parse(strings.TrimSpace(q)); ok {
		// An order's id goes straight to the order.
		if _, err := c.cfg.App.Queries.Orders.Get(r.Context(), scope(s), id); err == nil {
			http.Redirect(w, r, "/console/orders/"+id, http.StatusSeeOther)
			return nil
		}
	}
	return c.show(c.ordersPage, "orders-list")(w, r, s)
}

// ordersPage lists orders with the API's filters (status, repeatable;
// settlement_status; customer_id; staff_id; from and to, on the scheduled
// start) and a search: q finds customers by name and, when one matches,
// lists that customer's orders.
func (c *Console) ordersPage(r *http.Request, s *session) (*page, error) {
	ctx, q := r.Context(), r.URL.Query()
	f := query.OrderFilter{Statuses: only(q["status"], order.Statuses), CustomerID: q.Get("customer_id"), StaffID: q.Get("staff_id")}
	if ss := q.Get("settlement_status"); ss == string(order.Unsettled) || ss == string(order.Settled) {
		f.SettlementStatus = ss
	}
	f.From, f.To = dayRange(r, s.loc)
	d := &ordersData{Statuses: choices(order.Statuses, f.Statuses), Settlement: f.SettlementStatus, Staff: f.StaffID,
		From: q.Get("from"), To: q.Get("to"), Q: strings.TrimSpace(q.Get("q"))}
	if f.CustomerID != "" && !uuid.Valid(f.CustomerID) {
		f.CustomerID = ""
	}
	if f.StaffID != "" && !uuid.Valid(f.StaffID) {
		f.StaffID = ""
	}
	if d.Q != "" && f.CustomerID == "" {
		if problem := text.Problem(d.Q, false); problem != "" || len(d.Q) > 200 {
			d.SearchNote = "The search must be a name of at most 200 characters."
		} else {
			found, err := c.cfg.App.Queries.Customers.List(ctx, s.principal.MerchantID, d.Q, query.Page{Number: 1, Size: 20})
			if err != nil {
				return nil, err
			}
			switch len(found.Items) {
			case 0:
				d.SearchNote = fmt.Sprintf("No customer's name matches %q.", d.Q)
			case 1:
				f.CustomerID = found.Items[0].ID
				d.SearchNote = fmt.Sprintf("Orders of %s.", found.Items[0].Name)
			default:
				d.SearchNote = fmt.Sprintf("%d customers match %q; pick one:", found.Total, d.Q)
				for _, v := range found.Items {
					d.Matches = append(d.Matches, option{Value: v.ID, Label: v.Name})
				}
			}
		}
	}
	d.CustomerID = f.CustomerID
	if len(d.Matches) == 0 && !(d.Q != "" && f.CustomerID == "") {
		list, err := c.cfg.App.Queries.Orders.List(ctx, scope(s), f, pageParam(r, 25))
		if err != nil {
			return nil, err
		}
		d.Items, d.Pager = list.Items, newPager(r, listOf[query.Order](list))
	}
	var err error
	if d.StaffOf, err = c.staffOptions(r, s, true); err != nil {
		return nil, err
	}
	if f.CustomerID != "" {
		d.Customers = []option{{Value: f.CustomerID, Label: c.customerName(r, s, f.CustomerID)}}
	}
	return &page{Title: "Orders", Nav: "orders", Data: d, name: "orders"}, nil
}

// staffOptions are the merchant's staff members (only the active ones when
// activeOnly), by name.
func (c *Console) staffOptions(r *http.Request, s *session, withInactive bool) ([]option, error) {
	staff, err := c.cfg.App.Queries.Staff.List(r.Context(), s.principal.MerchantID, "", query.Page{Number: 1, Size: 200})
	if err != nil {
		return nil, err
	}
	var out []option
	for _, v := range staff.Items {
		if v.Active || withInactive {
			out = append(out, option{Value: v.ID, Label: v.Name})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Label < out[j].Label })
	return out, nil
}

// entry is one change-log row as the timeline shows it.
type entry struct {
	Version    int
	Action     string
	Actor      string
	You        bool
	OccurredAt time.Time
	Created    bool
	Changes    []fieldChange
}

type fieldChange struct{ Field, Before, After string }

type orderData struct {
	Order        query.Order
	Next         []string // statuses the order may move to
	Final        bool
	Schedule     *query.Schedule
	ScheduleNext []string
	Timeline     []entry
	Parked       *ops.ParkedAggregate
	Request      string
	Customer     string
	Address      string
	Phone        string
	Methods      []option
}

// orderPage shows an order: its status and what it may move to, its
// assignment and schedule, its settlement, and its change log as a
// timeline (who, when, what changed from what to what).
func (c *Console) orderPage(r *http.Request, s *session) (*page, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	ctx, sc := r.Context(), scope(s)
	o, err := c.cfg.App.Queries.Orders.Get(ctx, sc, id)
	if err != nil {
		return nil, err
	}
	d := &orderData{Order: o, Final: order.Status(o.Status).Final()}
	for _, st := range order.Statuses {
		if order.Status(o.Status).CanMoveTo(st) && st != order.StatusCompleted {
			d.Next = append(d.Next, string(st))
		}
	}
	if o.RequestID != nil {
		d.Request = *o.RequestID
	}
	if cu, err := c.cfg.App.Queries.Customers.Get(ctx, s.principal.MerchantID, o.CustomerID); err == nil {
		d.Customer, d.Address, d.Phone = customerName(cu), cu.Address, cu.Phone
	}
	if d.Schedule, err = c.scheduleOf(r, s, o); err != nil {
		return nil, err
	}
	if d.Schedule != nil {
		for _, st := range []schedule.Status{schedule.StatusInService, schedule.StatusDone, schedule.StatusCancelled} {
			if schedule.Status(d.Schedule.Status).CanMoveTo(st) {
				d.ScheduleNext = append(d.ScheduleNext, string(st))
			}
		}
	}
	changes, err := c.cfg.App.Queries.Orders.Changes(ctx, sc, id)
	if err != nil {
		return nil, err
	}
	show := c.showValue(r, s, changes)
	for _, ch := range slices.Backward(changes) {
		d.Timeline = append(d.Timeline, timelineEntry(ch, s.principal.Subject(), show))
	}
	if c.cfg.Parked != nil {
		a, parked, err := c.cfg.Parked.IsParked(ctx, aggregates.Order.Projection, s.principal.MerchantID, id)
		if err != nil {
			c.log.WarnContext(ctx, "parked check failed", "id", id, "error", err)
		} else if parked {
			d.Parked = &a
		}
	}
	for _, m := range []string{"", "cash", "card", "bank_transfer", "other"} {
		d.Methods = append(d.Methods, option{Value: m, Label: label(m)})
	}
	return &page{Title: "Order " + short(id), Nav: "orders", Data: d, name: "order"}, nil
}

// shortActor shows a key by the first block of its id: "key:1a2b3c4d".
func shortActor(actor string) string {
	if id, ok := strings.CutPrefix(actor, "key:"); ok {
		return "key:" + short(id)
	}
	return actor
}

// short is the first block of an id, enough to tell orders apart on a
// screen.
func short(id string) string {
	if i := strings.IndexByte(id, '-'); i > 0 {
		return id[:i]
	}
	return id
}

// scheduleOf finds the order's schedule: the staff member's schedule that
// starts when the order's assignment does.
func (c *Console) scheduleOf(r *http.Request, s *session, o query.Order) (*query.Schedule, error) {
	if o.StaffID == nil || o.ScheduledStartAt == nil {
		return nil, nil
	}
	from, to := *o.ScheduledStartAt, o.ScheduledStartAt.Add(time.Microsecond)
	l, err := c.cfg.App.Queries.Schedules.List(r.Context(), scope(s), query.ScheduleFilter{StaffID: *o.StaffID, From: &from, To: &to},
		query.Page{Number: 1, Size: 50})
	if err != nil {
		return nil, err
	}
	for _, x := range l.Items {
		if x.OrderID == o.ID && x.Status != string(schedule.StatusCancelled) {
			return &x, nil
		}
	}
	return nil, nil
}

// timelineEntry is a change-log row with the fields its event changed,
// each value as show shows it.
func timelineEntry(ch query.Change, you string, show func(field string, v any) string) entry {
	e := entry{Version: ch.Version, Action: ch.Action, Actor: shortActor(ch.Actor), You: ch.Actor == you, OccurredAt: ch.OccurredAt,
		Created: ch.Before == nil}
	before, after := snapshot(ch.Before), snapshot(ch.After)
	keys := make([]string, 0, len(after))
	for k := range after {
		keys = append(keys, k)
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "version" || k == "updated_at" || k == "created_at" || k == "id" {
			continue
		}
		b, a := show(k, before[k]), show(k, after[k])
		if b == a || (e.Created && a == "") {
			continue
		}
		e.Changes = append(e.Changes, fieldChange{Field: fieldLabel(k), Before: b, After: a})
	}
	return e
}

// snapshot decodes a change-log snapshot (JSON) into its fields.
func snapshot(v any) map[string]any {
	if v == nil {
		return nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&m) != nil {
		return nil
	}
	return m
}

// fieldLabel names a snapshot's field for people: paid_amount_cents is
// "paid amount", staff_id "staff".
func fieldLabel(field string) string {
	return label(strings.TrimSuffix(strings.TrimSuffix(field, "_cents"), "_id"))
}

// showValue shows the snapshots' values as the pages do: amounts with
// decimals, times in the session's zone, staff members and customers by
// name (looked up once per id).
func (c *Console) showValue(r *http.Request, s *session, changes []query.Change) func(field string, v any) string {
	names := map[string]string{}
	for _, ch := range changes {
		for _, snap := range []map[string]any{snapshot(ch.Before), snapshot(ch.After)} {
			for field, lookup := range map[string]func(id string) (string, error){
				"staff_id": func(id string) (string, error) {
					v, err := c.cfg.App.Queries.Staff.Get(r.Context(), s.principal.MerchantID, id)
					return v.Name, err
				},
				"customer_id": func(id string) (string, error) {
					v, err := c.cfg.App.Queries.Customers.Get(r.Context(), s.principal.MerchantID, id)
					return v.Name, err
				},
			} {
				if id, ok := snap[field].(string); ok && id != "" && names[id] == "" {
					if n, err := lookup(id); err == nil {
						names[id] = n
					}
				}
			}
		}
	}
	return func(field string, v any) string {
		switch x := v.(type) {
		case nil:
			return ""
		case json.Number:
			if n, err := x.Int64(); err == nil && strings.HasSuffix(field, "_cents") {
				return money(n)
			}
			return x.String()
		case string:
			if n := names[x]; n != "" {
				return n
			}
			if t, err := time.Parse(time.RFC3339Nano, x); err == nil && strings.HasSuffix(field, "_at") {
				return t.In(s.loc).Format("2006-01-02 15:04 MST")
			}
			return x
		default:
			return fmt.Sprint(x)
		}
	}
}

// orderAction runs one of the order page's forms.
func (c *Console) orderAction(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	f := newFormReader(r, s)
	t := command.OrderTarget{Meta: c.meta(w, s), OrderID: id, ExpectedVersion: f.version()}
	orders := c.cfg.App.Commands.Orders
	ctx := r.Context()
	var (
		written command.Written
		message string
		fields  []string
	)
	action := r.PathValue("action")
	switch action {
	case "status":
		st := f.text("status")
		fields, message = []string{"status"}, "Order "+label(st)+"."
		if err = f.Err(); err == nil {
			written, err = orders.ChangeStatus(ctx, command.ChangeOrderStatus{OrderTarget: t, Status: st})
		}
	case "cancel":
		fields, message = []string{"reason"}, "Order cancelled."
		if err = f.Err(); err == nil {
			written, err = orders.Cancel(ctx, command.CancelOrder{OrderTarget: t, Reason: f.text("reason")})
		}
	case "settle":
		fields, message = []string{"settlement_status", "paid_amount_cents", "payment_method", "paid_at", "settlement_note"}, "Settlement saved."
		cmd := command.SettleOrder{OrderTarget: t, SettlementStatus: f.text("settlement_status"), PaidAmountCents: f.cents("paid_amount_cents"),
			PaymentMethod: f.text("payment_method"), PaidAt: f.when("paid_at"), SettlementNote: f.text("settlement_note")}
		if err = f.Err(); err == nil {
			written, err = orders.Settle(ctx, cmd)
		}
	case "details":
		fields, message = []string{"amount_cents", "notes"}, "Order saved."
		cmd := command.UpdateOrderDetails{OrderTarget: t, AmountCents: f.optCents("amount_cents"), Notes: f.optText("notes")}
		if err = f.Err(); err == nil {
			written, err = orders.UpdateDetails(ctx, cmd)
		}
	case "schedule":
		st := f.text("status")
		fields, message = []string{"status"}, "Schedule "+label(st)+"."
		cmd := command.ChangeScheduleStatus{Meta: t.Meta, ScheduleID: f.text("schedule_id"), Status: st, OrderID: id}
		if !uuid.Valid(cmd.ScheduleID) {
			err = apperr.ErrNotFound
		} else if err = f.Err(); err == nil {
			written, err = c.cfg.App.Commands.Schedules.ChangeStatus(ctx, cmd)
		}
	default:
		return apperr.ErrNotFound
	}
	if err != nil {
		return c.refuse(w, r, s, err, action, c.orderPage, fields...)
	}
	return c.done(w, r, s, written.Position, "/console/orders/"+id, message)
}
