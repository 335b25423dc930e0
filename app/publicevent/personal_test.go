package publicevent_test

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"hearth/app/publicevent"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/plan"
	"hearth/domain/schedule"
	"hearth/domain/servicerequest"
	"hearth/internal/aggregates"
)

// registered are the stored event types of every stream type that leaves
// Hearth (aggregates.Outbound): TestEveryTextFieldIsDeclared fails for a
// stream type missing here, so a new aggregate's events are checked too.
var registered = map[string]func() []string{
	order.StreamType:          order.EventTypes,
	schedule.StreamType:       schedule.EventTypes,
	servicerequest.StreamType: servicerequest.EventTypes,
	plan.StreamType:           plan.EventTypes,
	event.SubjectStreamType:   func() []string { return []string{event.SubjectErasedType} },
}

// notPersonal are the text fields of stored events that are not personal
// data (docs/personal-data.md: ids, statuses, payment methods and catalog
// items stay in clear everywhere), by JSON name (a nested field's last
// one). Any other text field of an
// event must be declared in its domain package's Personal map: then it is
// sealed at rest, erased with its customer and withheld from the relay.
var notPersonal = map[string]string{
	"order_id": "id", "request_id": "id", "customer_id": "id", "plan_id": "id", "schedule_id": "id",
	"staff_id": "id", "catalog_item_id": "id", "subject_id": "id",
	"status": "status", "from": "status", "to": "status", "settlement_status": "status",
	"source": "one of servicerequest.Sources", "subject_type": "customer or staff_member",
	"frequency": "one of the recurrence's frequencies", "time_zone": "an IANA zone name",
	"visit_date": "a date", "payment_method": "not personal data on its own (docs/personal-data.md)",
}

// outbound is every stream type that leaves Hearth with its registered
// stored event types.
func outbound(t *testing.T) []aggregates.Facts {
	t.Helper()
	facts := aggregates.Outbound()
	for _, f := range facts {
		if registered[f.Type] == nil {
			t.Fatalf("stream type %q leaves Hearth but its event types are not in this test's registered", f.Type)
		}
	}
	return facts
}

// textFields returns the JSON paths of the text (string kind) fields of v's
// type, through nested structs and slices, and whether it embeds
// event.Erasure.
func textFields(typ reflect.Type, prefix string) (paths []string, erasure bool) {
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
		typ = typ.Elem()
	}
	if typ.Kind() != reflect.Struct || typ == reflect.TypeOf(time.Time{}) {
		return nil, false
	}
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Type == reflect.TypeOf(event.Erasure{}) {
			erasure = true
			continue
		}
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.String {
			paths = append(paths, prefix+name)
			continue
		}
		sub, _ := textFields(ft, prefix+name+".")
		paths = append(paths, sub...)
	}
	return paths, erasure
}

// Every text field of every stored event of every stream type that leaves
// Hearth is either declared personal in its domain package's Personal map
// (sealed at rest, erased with the customer, withheld from the relay) or
// known not to be personal: a new event type, or a new field, that carries
// free text about a customer fails here until it is declared.
func TestEveryTextFieldIsDeclared(t *testing.T) {
	for _, f := range outbound(t) {
		types := registered[f.Type]()
		for typ := range f.Personal {
			if !slices.Contains(types, typ) {
				t.Errorf("%s: Personal names %s, which is not one of its event types", f.Type, typ)
			}
		}
		for _, typ := range types {
			e, err := f.Decode(typ, required)
			if err != nil {
				t.Fatalf("%s %s: %v", f.Type, typ, err)
			}
			paths, erasure := textFields(reflect.TypeOf(e), "")
			personal := f.Personal[typ]
			if erasure != (len(personal) > 0) {
				t.Errorf("%s %s: embeds event.Erasure: %v, declares personal fields %v: both or neither", f.Type, typ, erasure, personal)
			}
			for _, p := range personal {
				if !slices.Contains(paths, p) {
					t.Errorf("%s %s: Personal names %q, which is not one of its text fields %v", f.Type, typ, p, paths)
				}
			}
			for _, p := range paths {
				leaf := p[strings.LastIndex(p, ".")+1:]
				if !slices.Contains(personal, p) && notPersonal[leaf] == "" {
					t.Errorf("%s %s: text field %q is neither declared personal (the domain package's Personal) nor known not to be (notPersonal here)",
						f.Type, typ, p)
				}
			}
		}
	}
}

// Every declared personal field of every stored event type leaves Hearth as
// documented (docs/api.md, personal fields): the feed and webhooks carry it
// under its own name, or null and named in erased once its customer was
// erased; the relay's form never carries it, null and named in withheld,
// even when the stored event holds it in clear (written before sealing)
// and the relay decodes it as stored.
func TestPersonalFieldsLeaveOnlyAsDocumented(t *testing.T) {
	for _, f := range outbound(t) {
		for _, typ := range registered[f.Type]() {
			personal := f.Personal[typ]
			clear := map[string]string{}
			for _, p := range personal {
				clear[p] = "MARK-" + typ + "-" + p
			}
			raw, err := json.Marshal(clear)
			if err != nil {
				t.Fatal(err)
			}
			e, err := f.Decode(typ, required, raw)
			if err != nil {
				t.Fatalf("%s %s: %v", f.Type, typ, err)
			}
			pub, err := publicevent.From(stored(f.Type, e))
			if err != nil {
				t.Fatalf("%s %s: %v", f.Type, typ, err)
			}
			data := dataOf(t, pub)
			for p, mark := range clear {
				if data[p] != mark {
					t.Errorf("%s: the feed's form carries %q as %v, want %q", pub.Type, p, data[p], mark)
				}
			}

			withheld := publicevent.WithoutPersonalData(pub)
			b, err := publicevent.Marshal(withheld)
			if err != nil {
				t.Fatal(err)
			}
			for p, mark := range clear {
				if strings.Contains(string(b), mark) {
					t.Errorf("%s: the relay's form carries %q: %s", pub.Type, p, b)
				}
			}
			data = dataOf(t, withheld)
			for _, p := range personal {
				if v, ok := data[p]; !ok || v != nil {
					t.Errorf("%s: the relay's form has %q %v, want null", pub.Type, p, v)
				}
			}
			if got := names(data["withheld"]); !sameSet(got, personal) {
				t.Errorf("%s: the relay's form names %v withheld, want %v", pub.Type, got, personal)
			}
			if len(personal) == 0 && !reflect.DeepEqual(withheld, pub) {
				t.Errorf("%s: carries no personal field, yet the relay's form differs: %+v", pub.Type, withheld)
			}
			if len(personal) == 0 {
				continue
			}

			erasedMarker, err := json.Marshal(event.Erasure{ErasedFields: personal})
			if err != nil {
				t.Fatal(err)
			}
			e, err = f.Decode(typ, required, erasedMarker)
			if err != nil {
				t.Fatalf("%s %s: %v", f.Type, typ, err)
			}
			pub, err = publicevent.From(stored(f.Type, e))
			if err != nil {
				t.Fatal(err)
			}
			data = dataOf(t, pub)
			for _, p := range personal {
				if v, ok := data[p]; !ok || v != nil {
					t.Errorf("%s: erased, the feed's form has %q %v, want null", pub.Type, p, v)
				}
			}
			if got := names(data["erased"]); !sameSet(got, personal) {
				t.Errorf("%s: erased, the feed's form names %v erased, want %v", pub.Type, got, personal)
			}
		}
	}
}

// dataOf is the data of pub as receivers decode it.
func dataOf(t *testing.T, pub publicevent.Event) map[string]any {
	t.Helper()
	b, err := publicevent.Marshal(pub)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v.Data
}

func names(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, s := range list {
		out = append(out, s.(string))
	}
	return out
}

func sameSet(a, b []string) bool {
	set := func(s []string) map[string]bool {
		m := map[string]bool{}
		for _, x := range s {
			m[x] = true
		}
		return m
	}
	return maps.Equal(set(a), set(b))
}
