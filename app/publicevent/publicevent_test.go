package publicevent_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"hearth/app/publicevent"
	"hearth/domain/civil"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/plan"
	"hearth/domain/schedule"
	"hearth/domain/servicerequest"
)

var at = time.Date(2026, 12, 1, 9, 30, 0, 123456789, time.FixedZone("CET", 3600))

// required holds every value some stored event type always carries
// (event.Checker), for the tests that decode an event of each type: a
// payload without them does not decode. "from" reads as a status and as a
// plan's date alike.
var required = []byte(`{"order_id":"o","request_id":"r","schedule_id":"s","plan_id":"p","customer_id":"c","staff_id":"x",
	"status":"pending","from":"2026-12-01","to":"confirmed","settlement_status":"paid","source":"phone","time_zone":"UTC",
	"start_at":"2026-12-02T08:00:00Z","end_at":"2026-12-02T10:00:00Z","at":"2026-12-02T08:00:00Z",
	"date":"2026-12-01","to_date":"2026-12-02","subject_type":"customer","subject_id":"c"}`)

func stored(streamType string, e event.Event) publicevent.Stored {
	typ := "OrderCancelled"
	if e != nil {
		typ = e.EventType()
	}
	return publicevent.Stored{Position: 42, Recorded: event.Recorded{
		Envelope: event.Envelope{
			ID: "0b9e7f64-5f3c-4d1a-9a49-3c1d6f1e2a10", Type: typ, StreamType: streamType,
			StreamID: "5d2c1b8e-7d6f-4a3b-8c9d-0e1f2a3b4c5d", Version: 3, MerchantID: "m-1",
			OccurredAt: at, CorrelationID: "corr", CausationID: "cause", Actor: "key:secret-key-id",
		},
		Event: e,
	}}
}

// Every event each aggregate can store has a public form whose data is the
// type DataOf names: adding a stored event without its public form fails
// here.
func TestEveryStoredEventHasAPublicForm(t *testing.T) {
	aggregates := []struct {
		streamType string
		types      []string
		decode     event.Decoder
	}{
		{order.StreamType, order.EventTypes(), order.Decode},
		{schedule.StreamType, schedule.EventTypes(), schedule.Decode},
		{servicerequest.StreamType, servicerequest.EventTypes(), servicerequest.Decode},
		{plan.StreamType, plan.EventTypes(), plan.Decode},
	}
	seen := map[string]bool{}
	for _, a := range aggregates {
		for _, typ := range append(a.types, event.SkippedType) {
			var e event.Event = event.Skipped{Of: "X"}
			if typ != event.SkippedType {
				var err error
				if e, err = a.decode(typ, required); err != nil {
					t.Fatal(err)
				}
			}
			pub, err := publicevent.From(stored(a.streamType, e))
			if err != nil {
				t.Fatalf("%s %s: %v", a.streamType, typ, err)
			}
			if !slices.Contains(publicevent.Types(), pub.Type) {
				t.Errorf("%s maps to %q, which Types does not list", typ, pub.Type)
			}
			if !strings.HasPrefix(pub.Type, pub.AggregateType+".") {
				t.Errorf("%s maps to %q, not named after its aggregate %q", typ, pub.Type, pub.AggregateType)
			}
			want, _ := publicevent.DataOf(pub.Type)
			if reflect.TypeOf(pub.Data) != reflect.TypeOf(want) {
				t.Errorf("%s: data is %T, DataOf says %T", pub.Type, pub.Data, want)
			}
			seen[pub.Type] = true
		}
	}
	// The data subjects' streams hold one event each, public by subject type.
	for _, subject := range []string{event.SubjectCustomer, event.SubjectStaffMember} {
		pub, err := publicevent.From(stored(event.SubjectStreamType, event.SubjectErased{SubjectType: subject, SubjectID: "s"}))
		if err != nil {
			t.Fatal(err)
		}
		if pub.AggregateType != subject || pub.Type != subject+".erased" {
			t.Errorf("%s's erasure maps to %q of %q", subject, pub.Type, pub.AggregateType)
		}
		seen[pub.Type] = true
	}
	seen[publicevent.WebhookEndpointPinged] = true
	for _, typ := range publicevent.Types() {
		if !seen[typ] {
			t.Errorf("Types lists %q, which no stored event maps to", typ)
		}
	}
}

func ptr(t time.Time) *time.Time { return &t }

func date(t *testing.T, s string) civil.Date {
	t.Helper()
	d, err := civil.ParseDate(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The public JSON of every event type, field by field: these are a
// contract with integrators.
func TestPublicJSON(t *testing.T) {
	start, end := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC), time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	until := date(t, "2027-06-30")
	weekly := plan.Terms{PriceCents: 9000, StaffID: "s", Window: plan.Window{Start: civil.At(9, 0), End: civil.At(11, 30)},
		Recurrence: plan.Recurrence{Frequency: plan.Weekly, Interval: 2, Weekdays: []time.Weekday{time.Monday, time.Thursday},
			Start: date(t, "2026-12-07"), Until: &until}}
	monthly := plan.Terms{Window: plan.Window{Start: civil.At(0, 0), End: civil.EndOfDay},
		Recurrence: plan.Recurrence{Frequency: plan.Monthly, Interval: 1, MonthDay: 31, Start: date(t, "2027-01-31"), Count: 12}}
	cases := []struct {
		streamType string
		e          event.Event
		want       string
	}{
		{order.StreamType, order.Created{OrderID: "o", RequestID: "r", CustomerID: "c", AmountCents: 12000, Notes: "n",
			ScheduledStartAt: &start, ScheduledEndAt: &end, Status: "pending"},
			`"type":"order.created","data":{"request_id":"r","customer_id":"c","amount_cents":12000,"notes":"n","scheduled_start_at":"2026-12-02T08:00:00Z","scheduled_end_at":"2026-12-02T10:00:00Z","status":"pending"}`},
		{order.StreamType, order.DetailsUpdated{CustomerID: "c", AmountCents: 5, Notes: "n"},
			`"type":"order.details_updated","data":{"customer_id":"c","amount_cents":5,"notes":"n"}`},
		{order.StreamType, order.StatusChanged{From: "in_service", To: "completed", CompletedAt: &end},
			`"type":"order.status_changed","data":{"from":"in_service","to":"completed","completed_at":"2026-12-02T10:00:00Z"}`},
		{order.StreamType, order.Cancelled{From: "pending", Reason: "moved away"},
			`"type":"order.cancelled","data":{"from":"pending","reason":"moved away"}`},
		{order.StreamType, order.AssignmentUpdated{StaffID: "s", StartAt: &start, EndAt: &end, DispatchNote: "d"},
			`"type":"order.assignment_updated","data":{"staff_id":"s","start_at":"2026-12-02T08:00:00Z","end_at":"2026-12-02T10:00:00Z","dispatch_note":"d"}`},
		{order.StreamType, order.AssignmentUpdated{},
			`"type":"order.assignment_updated","data":{"dispatch_note":""}`},
		{order.StreamType, order.SettlementUpdated{SettlementStatus: "paid", PaidAmountCents: 12000, PaymentMethod: "card", PaidAt: &end, SettlementNote: "s"},
			`"type":"order.settlement_updated","data":{"settlement_status":"paid","paid_amount_cents":12000,"payment_method":"card","paid_at":"2026-12-02T10:00:00Z","settlement_note":"s"}`},
		{schedule.StreamType, schedule.Created{ScheduleID: "x", OrderID: "o", StaffID: "s", StartAt: start, EndAt: end, Notes: "n", Status: "planned"},
			`"type":"schedule.created","data":{"order_id":"o","staff_id":"s","start_at":"2026-12-02T08:00:00Z","end_at":"2026-12-02T10:00:00Z","notes":"n","status":"planned"}`},
		{schedule.StreamType, schedule.AssignmentUpdated{StaffID: "s", StartAt: start, EndAt: end},
			`"type":"schedule.assignment_updated","data":{"staff_id":"s","start_at":"2026-12-02T08:00:00Z","end_at":"2026-12-02T10:00:00Z"}`},
		{schedule.StreamType, schedule.StatusChanged{From: "planned", To: "in_service"},
			`"type":"schedule.status_changed","data":{"from":"planned","to":"in_service"}`},
		{servicerequest.StreamType, servicerequest.Created{RequestID: "x", CustomerID: "c", CatalogItemID: "i", Content: "leak",
			AppointmentStartAt: &start, AppointmentEndAt: &end, Source: "phone", Notes: "n", Status: "new"},
			`"type":"service_request.created","data":{"customer_id":"c","catalog_item_id":"i","content":"leak","appointment_start_at":"2026-12-02T08:00:00Z","appointment_end_at":"2026-12-02T10:00:00Z","source":"phone","notes":"n","status":"new"}`},
		{servicerequest.StreamType, servicerequest.DetailsUpdated{Content: "leak", Notes: "n"},
			`"type":"service_request.details_updated","data":{"content":"leak","notes":"n"}`},
		{servicerequest.StreamType, servicerequest.StatusChanged{From: "new", To: "confirmed"},
			`"type":"service_request.status_changed","data":{"from":"new","to":"confirmed"}`},
		{servicerequest.StreamType, servicerequest.Converted{OrderID: "o"},
			`"type":"service_request.converted","data":{"order_id":"o"}`},
		{schedule.StreamType, event.Skipped{Of: "ScheduleCreated"},
			`"type":"schedule.event_skipped","data":{"of":"ScheduleCreated"}`},
		{order.StreamType, order.Created{OrderID: "o", CustomerID: "c", AmountCents: 9000, Notes: "", ScheduledStartAt: &start,
			ScheduledEndAt: &end, Status: "pending", PlanID: "p", VisitDate: "2026-12-02"},
			`"type":"order.created","data":{"customer_id":"c","amount_cents":9000,"notes":"","scheduled_start_at":"2026-12-02T08:00:00Z","scheduled_end_at":"2026-12-02T10:00:00Z","status":"pending","plan_id":"p","visit_date":"2026-12-02"}`},
		{order.StreamType, order.Cancelled{From: "pending", Erasure: event.Erasure{ErasedFields: []string{"reason"}}},
			`"type":"order.cancelled","data":{"from":"pending","reason":null,"erased":["reason"]}`},
		{order.StreamType, event.Skipped{Of: "OrderSettlementUpdated"},
			`"type":"order.event_skipped","data":{"of":"OrderSettlementUpdated"}`},
		{servicerequest.StreamType, event.Skipped{Of: "ServiceRequestConverted"},
			`"type":"service_request.event_skipped","data":{"of":"ServiceRequestConverted"}`},
		{plan.StreamType, event.Skipped{Of: "ServicePlanPaused"},
			`"type":"service_plan.event_skipped","data":{"of":"ServicePlanPaused"}`},
		{order.StreamType, event.PersonalDataErased{SubjectType: "customer", SubjectID: "c"},
			`"type":"order.personal_data_erased","data":{"subject_type":"customer","subject_id":"c"}`},
		{schedule.StreamType, event.PersonalDataErased{SubjectType: "customer", SubjectID: "c"},
			`"type":"schedule.personal_data_erased","data":{"subject_type":"customer","subject_id":"c"}`},
		{servicerequest.StreamType, event.PersonalDataErased{SubjectType: "customer", SubjectID: "c"},
			`"type":"service_request.personal_data_erased","data":{"subject_type":"customer","subject_id":"c"}`},
		{event.SubjectStreamType, event.SubjectErased{SubjectType: event.SubjectCustomer, SubjectID: "c"},
			`"type":"customer.erased","data":{"erased_at":"2026-12-01T08:30:00.123456Z"}`},
		{event.SubjectStreamType, event.SubjectErased{SubjectType: event.SubjectStaffMember, SubjectID: "s"},
			`"type":"staff_member.erased","data":{"erased_at":"2026-12-01T08:30:00.123456Z"}`},
		{plan.StreamType, plan.Created{PlanID: "p", CustomerID: "c", CatalogItemID: "i", TimeZone: "Europe/Paris", Terms: weekly},
			`"type":"service_plan.created","data":{"customer_id":"c","catalog_item_id":"i","time_zone":"Europe/Paris","terms":{"price_cents":9000,"staff_id":"s","window":{"start":"09:00","end":"11:30"},"recurrence":{"frequency":"weekly","interval":2,"weekdays":[1,4],"start":"2026-12-07","until":"2027-06-30"}}}`},
		{plan.StreamType, plan.Changed{From: date(t, "2027-01-04"), Terms: monthly},
			`"type":"service_plan.changed","data":{"from":"2027-01-04","terms":{"price_cents":0,"window":{"start":"00:00","end":"24:00"},"recurrence":{"frequency":"monthly","interval":1,"month_day":31,"start":"2027-01-31","count":12}}}`},
		{plan.StreamType, plan.VisitSkipped{Date: date(t, "2026-12-21")},
			`"type":"service_plan.visit_skipped","data":{"date":"2026-12-21"}`},
		{plan.StreamType, plan.VisitMoved{Date: date(t, "2026-12-21"), ToDate: date(t, "2026-12-22"), ToStart: civil.At(14, 0)},
			`"type":"service_plan.visit_moved","data":{"date":"2026-12-21","to_date":"2026-12-22","start":"14:00"}`},
		{plan.StreamType, plan.Paused{At: at},
			`"type":"service_plan.paused","data":{"at":"2026-12-01T08:30:00.123456Z"}`},
		{plan.StreamType, plan.Resumed{At: end},
			`"type":"service_plan.resumed","data":{"at":"2026-12-02T10:00:00Z"}`},
		{plan.StreamType, plan.Ended{At: start},
			`"type":"service_plan.ended","data":{"at":"2026-12-02T08:00:00Z"}`},
	}
	pinned := map[string]bool{publicevent.WebhookEndpointPinged: true} // TestPing
	for _, c := range cases {
		pub, err := publicevent.From(stored(c.streamType, c.e))
		if err != nil {
			t.Fatal(err)
		}
		pinned[pub.Type] = true
		got, err := publicevent.Marshal(pub)
		if err != nil {
			t.Fatal(err)
		}
		agg := strings.SplitN(strings.SplitN(c.want, `"`, 5)[3], ".", 2)[0]
		want := `{"id":"0b9e7f64-5f3c-4d1a-9a49-3c1d6f1e2a10",` + strings.Replace(c.want, `,"data"`,
			`,"schema_version":1,"merchant_id":"m-1","aggregate_type":"`+agg+`","aggregate_id":"5d2c1b8e-7d6f-4a3b-8c9d-0e1f2a3b4c5d","aggregate_version":3,"position":42,"occurred_at":"2026-12-01T08:30:00.123456Z","data"`, 1) + `}`
		if string(got) != want {
			t.Errorf("%s:\n got %s\nwant %s", c.e.EventType(), got, want)
		}
	}
	// A type without a case here could change its JSON in a refactor of
	// its domain event, and integrators would learn it from their parsers.
	for _, typ := range publicevent.Types() {
		if !pinned[typ] {
			t.Errorf("%s: no case pins its public JSON", typ)
		}
	}
}

// Internal facts of the stored envelope never reach the public form.
func TestInternalFieldsStayInternal(t *testing.T) {
	pub, err := publicevent.From(stored(order.StreamType, order.Cancelled{From: "pending", Reason: "r"}))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(pub)
	for _, internal := range []string{"secret-key-id", "corr", "cause", "stream_type", "actor"} {
		if strings.Contains(string(b), internal) {
			t.Errorf("public form carries %q: %s", internal, b)
		}
	}
}

func TestUnmappableEventsAreErrors(t *testing.T) {
	if _, err := publicevent.From(stored("invoice", order.Cancelled{})); err == nil || !strings.Contains(err.Error(), `"invoice"`) {
		t.Errorf("unknown stream type: %v", err)
	}
	s := stored(order.StreamType, nil)
	if _, err := publicevent.From(s); err == nil || !strings.Contains(err.Error(), s.ID) {
		t.Errorf("undecoded payload: %v", err)
	}
}

func TestPing(t *testing.T) {
	b, _ := publicevent.Marshal(publicevent.Ping("id-1", "m-1", "ep-1", at))
	want := `{"id":"id-1","type":"webhook_endpoint.ping","schema_version":1,"merchant_id":"m-1","aggregate_type":"webhook_endpoint","aggregate_id":"ep-1","aggregate_version":1,"position":0,"occurred_at":"2026-12-01T08:30:00.123456Z","data":{"message":"Hearth test delivery"}}`
	if string(b) != want {
		t.Errorf("got %s\nwant %s", b, want)
	}
}
