package ops

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"hearth/app/publicevent"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/order"
	"hearth/domain/reference"
	"hearth/domain/schedule"
	"hearth/domain/servicerequest"
	"hearth/domain/uuid"
	"hearth/domain/webhook"
)

// ActionCustomerExport is an export of everything held about one customer
// (an access request: GDPR articles 15 and 20).
const ActionCustomerExport = "customer.export"

// ExportSchema names the export document's format; it changes when a field
// is removed or changes meaning (docs/api.md, the schema CustomerExport).
const ExportSchema = "hearth.customer-export/1"

// MaxExportItems caps each list of an export (service requests, orders,
// service plans, schedules, change log, events, webhook deliveries). The document is built
// in memory, so the cap bounds what one export costs; a customer past it is
// refused whole (RuleExportTooLarge), never exported in part.
const MaxExportItems = 20_000

// RuleExportTooLarge is an export one of whose lists would pass
// MaxExportItems.
const RuleExportTooLarge = "export.too_large"

// ExportRequest is one export: who asks, and which customer of which
// merchant.
type ExportRequest struct {
	// By is who exports, for the audit log ("key:<id>" over HTTP, the
	// CLI's --by or cli:$USER).
	By         string
	MerchantID string
	CustomerID string
}

// CustomerExport is everything Hearth holds about one customer.
type CustomerExport struct {
	Schema     string
	ExportedAt time.Time
	MerchantID string
	Customer   reference.Customer
	// ServiceRequests, Orders and Plans (service plans) are the customer's
	// (their customer_id is the customer's now); Schedules are those of the
	// orders. A plan's visits are orders of the customer: Orders holds
	// them. Each list is ordered by creation, then id.
	ServiceRequests []ExportedServiceRequest
	Orders          []ExportedOrder
	Plans           []query.Plan
	Schedules       []ExportedSchedule
	// ChangeLog holds the change-log rows of those aggregates, by
	// aggregate then version.
	ChangeLog []query.Change
	// Events are the stored events of those aggregates in their public
	// form, by position.
	Events []publicevent.Event
	// WebhookDeliveries are the deliveries of those events, by endpoint and
	// insertion order, each with the body it sends.
	WebhookDeliveries []ExportedDelivery
}

// ExportedOrder is an order of the export with the personal fields it
// withholds: emptied because they were written about another customer (an
// order moved to this one keeps such notes until they are written again),
// named so that a reader can tell them from fields that are empty. They
// are the fields the change log's snapshot of the row's version names
// withheld.
type ExportedOrder struct {
	query.Order
	Withheld []string
}

// ExportedSchedule is a schedule of the export with the personal fields it
// withholds, as ExportedOrder.
type ExportedSchedule struct {
	query.Schedule
	Withheld []string
}

// ExportedServiceRequest is a service request of the export with the
// personal fields it withholds, as ExportedOrder.
type ExportedServiceRequest struct {
	query.ServiceRequest
	Withheld []string
}

// ExportedDelivery is one webhook delivery of an event about the customer,
// with its endpoint's origin (webhook.Origin: scheme, host and port, never
// the credentials a URL may carry) and the payload it sends (the event's
// public form). Its Error is deliveryOutcome's, not the delivery log's.
type ExportedDelivery struct {
	webhook.Delivery
	URL     string
	Payload publicevent.Event
}

// ExportRows is what the read models hold about a customer
// (readmodel.CustomerRows).
type ExportRows struct {
	ServiceRequests []query.ServiceRequest
	Orders          []query.Order
	Plans           []query.Plan
	Schedules       []query.Schedule
	ChangeLog       []query.Change
}

// ExportHistory is what the event store holds about a customer
// (refdata.Store).
type ExportHistory struct {
	Customer reference.Customer
	// Events are the stored events, decoded, with their positions.
	Events []publicevent.Stored
	// Others are the events (by id) whose personal fields were written
	// about another customer, on an aggregate that changed hands: the
	// export withholds those fields.
	Others            map[string]bool
	WebhookDeliveries []StoredDelivery
	// At is the transaction's time: when the export was taken.
	At time.Time
}

// StoredDelivery is a delivery as the event store holds it: its endpoint's
// URL beside it; its payload is built from its event.
type StoredDelivery struct {
	webhook.Delivery
	URL string
}

// ExportReadModel reads what the read models hold about one customer of a
// merchant, in one snapshot. limit caps each list: more rows than limit in
// one is an *apperr.RuleError RuleExportTooLarge.
type ExportReadModel interface {
	CustomerRows(ctx context.Context, merchantID, customerID string, limit int) (ExportRows, error)
}

// ExportEventStore reads the customer's record, the events of the given
// aggregates and their webhook deliveries in one snapshot of the event
// store, and records the entry audit returns in the same transaction. An
// unknown customer (or another merchant's) is apperr.ErrNotFound, and
// nothing is recorded. limit caps each list as for ExportReadModel.
type ExportEventStore interface {
	CustomerHistory(ctx context.Context, merchantID, customerID string, aggregateIDs []string, limit int,
		audit func(ExportHistory) AuditEntry) (ExportHistory, error)
}

// Exports is the use case of exporting a customer's data.
type Exports struct {
	rows  ExportReadModel
	store ExportEventStore
	limit int
}

// NewExports returns the export use case on its adapters; limit caps each
// list (0: MaxExportItems).
func NewExports(rows ExportReadModel, store ExportEventStore, limit int) (*Exports, error) {
	if rows == nil || store == nil {
		return nil, errors.New("ops.NewExports: nil dependency")
	}
	return &Exports{rows: rows, store: store, limit: cmp.Or(limit, MaxExportItems)}, nil
}

// ExportCustomer returns everything Hearth holds about one customer and
// records the export in the audit log (who, which customer, how many of
// each; never a value), in the event store's transaction that read it.
//
// The read models are read first, in one snapshot, and name the
// aggregates; the event store is read next, in one snapshot of its own.
// Read models only ever trail the event store, so the events and
// deliveries hold at least every version the rows and the change log
// reflect (and maybe later ones not yet projected).
func (x *Exports) ExportCustomer(ctx context.Context, req ExportRequest) (CustomerExport, error) {
	by := strings.TrimSpace(req.By)
	if err := CheckActor(by); err != nil {
		return CustomerExport{}, err
	}
	id, ok := uuid.Parse(req.CustomerID)
	if !ok {
		return CustomerExport{}, apperr.Invalid("id", "must be a UUID, got %q", req.CustomerID)
	}
	if req.MerchantID == "" {
		return CustomerExport{}, errors.New("export customer: no merchant")
	}
	req.CustomerID = id
	rows, err := x.rows.CustomerRows(ctx, req.MerchantID, req.CustomerID, x.limit)
	if err != nil {
		return CustomerExport{}, err
	}
	ids := make([]string, 0, len(rows.ServiceRequests)+len(rows.Orders)+len(rows.Plans)+len(rows.Schedules))
	for _, v := range rows.ServiceRequests {
		ids = append(ids, v.ID)
	}
	for _, v := range rows.Orders {
		ids = append(ids, v.ID)
	}
	for _, v := range rows.Plans {
		ids = append(ids, v.ID)
	}
	for _, v := range rows.Schedules {
		ids = append(ids, v.ID)
	}
	h, err := x.store.CustomerHistory(ctx, req.MerchantID, req.CustomerID, ids, x.limit, func(h ExportHistory) AuditEntry {
		return AuditEntry{Actor: by, Action: ActionCustomerExport, Target: "customer/" + req.CustomerID,
			Details: map[string]any{"merchant_id": req.MerchantID, "service_requests": len(rows.ServiceRequests),
				"orders": len(rows.Orders), "plans": len(rows.Plans), "schedules": len(rows.Schedules), "change_log": len(rows.ChangeLog),
				"events": len(h.Events), "webhook_deliveries": len(h.WebhookDeliveries)}}
	})
	if err != nil {
		return CustomerExport{}, err
	}
	held := heldFromOthers(h.Events, h.Others)
	changes := make([]query.Change, len(rows.ChangeLog))
	for i, c := range rows.ChangeLog {
		if changes[i], err = withholdOthers(c, req.CustomerID, held[c.AggregateID]); err != nil {
			return CustomerExport{}, fmt.Errorf("export customer: %w", err)
		}
	}
	requests, orders, schedules := withholdRows(rows, held)
	out := CustomerExport{Schema: ExportSchema, ExportedAt: h.At, MerchantID: req.MerchantID, Customer: h.Customer,
		ServiceRequests: requests, Orders: orders, Plans: rows.Plans, Schedules: schedules, ChangeLog: changes,
		Events: make([]publicevent.Event, len(h.Events)), WebhookDeliveries: make([]ExportedDelivery, len(h.WebhookDeliveries))}
	byID := make(map[string]publicevent.Event, len(h.Events))
	for i, s := range h.Events {
		if out.Events[i], err = publicevent.From(s); err != nil {
			return CustomerExport{}, fmt.Errorf("export customer: %w", err)
		}
		if h.Others[s.ID] {
			out.Events[i] = publicevent.WithoutPersonalData(out.Events[i])
		}
		byID[s.ID] = out.Events[i]
	}
	for i, d := range h.WebhookDeliveries {
		p, ok := byID[d.EventID]
		if !ok {
			return CustomerExport{}, fmt.Errorf("export customer: delivery %s: event %s is not among the customer's events", d.ID, d.EventID)
		}
		d.Error = deliveryOutcome(d.Delivery)
		out.WebhookDeliveries[i] = ExportedDelivery{Delivery: d.Delivery, URL: webhook.Origin(d.URL), Payload: p}
	}
	return out, nil
}

// deliveryOutcome says why a delivery's last attempt failed ("" when it
// did not, or none was made) in general terms, from what Hearth knows
// itself: the receiver's status, and whether the delivery was sent. The
// delivery log's error text (webhooks.Sender's) quotes the receiver (a
// redirect's Location, its answer's body) and the transport (a URL with
// its userinfo): the merchant's receiver's business, and the export is
// handed to the customer. The only things read from that text are the
// texts Hearth writes itself (webhook.NotSent, webhook.ErasedError), which
// a receiver's words never are; even so, they only pick one of the fixed
// phrases.
func deliveryOutcome(d webhook.Delivery) string {
	switch {
	case d.Error == "":
		return ""
	case d.ResponseStatus >= 300 && d.ResponseStatus < 400:
		return fmt.Sprintf("the receiver answered HTTP %d, a redirect, which is not followed", d.ResponseStatus)
	case d.ResponseStatus != 0:
		return fmt.Sprintf("the receiver answered HTTP %d", d.ResponseStatus)
	case d.Attempts == 0 || strings.HasPrefix(d.Error, webhook.NotSent):
		return "not sent to the receiver"
	case d.Error == webhook.ErasedError: // it may have been either
		return "the attempt failed; what was recorded of it was erased with the customer's personal data"
	}
	return "no answer from the receiver: it could not be reached, or did not answer in time"
}

// snapshotPersonal names, by aggregate type, the personal fields of a
// change-log snapshot (the view's JSON names) of the aggregates whose view
// names its customer.
var snapshotPersonal = map[string][]string{
	order.StreamType:          {"notes", "dispatch_note", "cancellation_reason", "settlement_note"},
	servicerequest.StreamType: {"content", "notes"},
}

// viewFields names, by aggregate type and stored event type, the personal
// fields of the view (by their JSON names) that an event writes: the
// domain's Personal maps, under the views' names.
var viewFields = func() map[string]map[string][]string {
	renamed := map[string]string{"reason": "cancellation_reason"} // an order's view calls it so
	out := map[string]map[string][]string{}
	for typ, personal := range map[string]map[string][]string{order.StreamType: order.Personal,
		schedule.StreamType: schedule.Personal, servicerequest.StreamType: servicerequest.Personal} {
		out[typ] = map[string][]string{}
		for eventType, fields := range personal {
			for _, f := range fields {
				out[typ][eventType] = append(out[typ][eventType], cmp.Or(renamed[f], f))
			}
		}
	}
	return out
}()

// PersonalViewFields names the personal fields of an aggregate type's view
// (their JSON names, sorted): what a tool that prints views (app verify)
// must not show.
func PersonalViewFields(aggregateType string) []string {
	var out []string
	for _, fields := range viewFields[aggregateType] {
		out = append(out, fields...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// heldFromOthers returns, by aggregate and version, the personal fields of
// its view (JSON names, sorted) whose text at that version was written
// about another customer (others): an order moved to this customer keeps
// a dispatch note, a settlement note and its schedule's notes written
// before the move until they are written again. events are by position.
func heldFromOthers(events []publicevent.Stored, others map[string]bool) map[string]map[int][]string {
	from := map[string]map[string]bool{} // by aggregate, then field: written about another customer
	out := map[string]map[int][]string{}
	for _, e := range events {
		fields := viewFields[e.StreamType][e.Type]
		if len(fields) > 0 && from[e.StreamID] == nil {
			from[e.StreamID] = map[string]bool{}
		}
		for _, f := range fields {
			from[e.StreamID][f] = others[e.ID]
		}
		var list []string
		for f, other := range from[e.StreamID] {
			if other {
				list = append(list, f)
			}
		}
		if len(list) > 0 {
			slices.Sort(list)
			if out[e.StreamID] == nil {
				out[e.StreamID] = map[int][]string{}
			}
			out[e.StreamID][e.Version] = list
		}
	}
	return out
}

// withholdRows returns the rows with their personal fields that held
// names at their versions emptied and named withheld (the change log's
// snapshot of that version names them too).
func withholdRows(rows ExportRows, held map[string]map[int][]string) ([]ExportedServiceRequest, []ExportedOrder, []ExportedSchedule) {
	orders := make([]ExportedOrder, len(rows.Orders))
	for i, o := range rows.Orders {
		withheld := held[o.ID][o.Version]
		for _, f := range withheld {
			switch f {
			case "notes":
				o.Notes = ""
			case "dispatch_note":
				o.DispatchNote = ""
			case "cancellation_reason":
				o.CancellationReason = ""
			case "settlement_note":
				o.SettlementNote = ""
			}
		}
		orders[i] = ExportedOrder{Order: o, Withheld: withheld}
	}
	schedules := make([]ExportedSchedule, len(rows.Schedules))
	for i, v := range rows.Schedules {
		withheld := held[v.ID][v.Version]
		if slices.Contains(withheld, "notes") {
			v.Notes = ""
		}
		schedules[i] = ExportedSchedule{Schedule: v, Withheld: withheld}
	}
	requests := make([]ExportedServiceRequest, len(rows.ServiceRequests))
	for i, v := range rows.ServiceRequests {
		withheld := held[v.ID][v.Version]
		for _, f := range withheld {
			switch f {
			case "content":
				v.Content = ""
			case "notes":
				v.Notes = ""
			}
		}
		requests[i] = ExportedServiceRequest{ServiceRequest: v, Withheld: withheld}
	}
	return requests, orders, schedules
}

// withholdOthers returns c with the personal fields of its snapshots that
// are not this customer's emptied and named withheld: the read model keeps
// every version in clear, the earlier customer's text among them. A
// snapshot of a version another customer had (an order moved to this one)
// has all of them withheld; one of this customer's, those held names at
// its version (text written before the move, still on the row).
func withholdOthers(c query.Change, customerID string, held map[int][]string) (query.Change, error) {
	fields := snapshotPersonal[c.AggregateType]
	if len(fields) == 0 && len(held) == 0 {
		return c, nil
	}
	var err error
	if c.Before, err = withholdSnapshot(c.Before, customerID, fields, held[c.Version-1]); err != nil {
		return c, fmt.Errorf("change %s of %s %s: %w", c.EventID, c.AggregateType, c.AggregateID, err)
	}
	if c.After, err = withholdSnapshot(c.After, customerID, fields, held[c.Version]); err != nil {
		return c, fmt.Errorf("change %s of %s %s: %w", c.EventID, c.AggregateType, c.AggregateID, err)
	}
	return c, nil
}

// withholdSnapshot is withholdOthers for one snapshot (JSON as stored, a
// view, or nil): all of fields when it names another customer, else held.
// It is decoded with json.Number, so that amounts keep every digit.
func withholdSnapshot(snapshot any, customerID string, fields, held []string) (any, error) {
	if snapshot == nil {
		return nil, nil
	}
	raw, ok := snapshot.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(snapshot); err != nil {
			return nil, err
		}
	}
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	if customer, ok := m["customer_id"].(string); !ok || customer == customerID {
		fields = held // a schedule names no customer: its order's moves are in held
	}
	if len(fields) == 0 {
		return snapshot, nil
	}
	for _, f := range fields {
		m[f] = ""
	}
	m["withheld"] = fields
	out, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(out), nil
}

// TooLarge is the error of a customer's export whose list what would pass
// limit.
func TooLarge(what string, limit int) error { return tooLarge("customer", what, limit) }

// StaffTooLarge is TooLarge for a staff member's export.
func StaffTooLarge(what string, limit int) error { return tooLarge("staff member", what, limit) }

func tooLarge(subject, what string, limit int) error {
	return &apperr.RuleError{Rule: RuleExportTooLarge,
		Detail: fmt.Sprintf("the %s has more than %d %s: an export holds at most %d of each", subject, limit, what, limit)}
}
