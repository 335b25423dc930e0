package httpport

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"hearth/app/publicevent"
)

// The document's public events are the ones Hearth sends: the Event
// schema's type enum and the webhooks section list exactly
// publicevent.Types(), and each webhook's data schema has exactly the Go
// data type's fields, with the required ones those that are never omitted.
func TestOpenAPIPublicEvents(t *testing.T) {
	_, raw := loadOpenAPI(t)
	schemas := raw["components"].(map[string]any)["schemas"].(map[string]any)
	enum := schemas["Event"].(map[string]any)["properties"].(map[string]any)["type"].(map[string]any)["enum"].([]any)
	var listed []string
	for _, v := range enum {
		listed = append(listed, v.(string))
	}
	sort.Strings(listed)
	if !slices.Equal(listed, publicevent.Types()) {
		t.Errorf("Event.type enum %v, Hearth sends %v", listed, publicevent.Types())
	}
	webhooks, _ := raw["webhooks"].(map[string]any)
	var hooked []string
	for typ := range webhooks {
		hooked = append(hooked, typ)
	}
	sort.Strings(hooked)
	if !slices.Equal(hooked, publicevent.Types()) {
		t.Errorf("webhooks %v, Hearth sends %v", hooked, publicevent.Types())
	}
	for _, typ := range publicevent.Types() {
		hook, ok := webhooks[typ].(map[string]any)
		if !ok {
			continue
		}
		allOf := hook["post"].(map[string]any)["requestBody"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)["allOf"].([]any)
		props := allOf[1].(map[string]any)["properties"].(map[string]any)
		if got := props["type"].(map[string]any)["enum"].([]any); len(got) != 1 || got[0] != typ {
			t.Errorf("webhook %s: type enum %v", typ, got)
		}
		ref := props["data"].(map[string]any)["$ref"].(string)
		data, _ := publicevent.DataOf(typ)
		if want := "#/components/schemas/" + reflect.TypeOf(data).Name(); ref != want {
			t.Errorf("webhook %s: data is %s, want %s", typ, ref, want)
			continue
		}
		checkSchemaFields(t, typ, schemas[strings.TrimPrefix(ref, "#/components/schemas/")].(map[string]any), reflect.TypeOf(data))
	}
}

func checkSchemaFields(t *testing.T, typ string, schema map[string]any, goType reflect.Type) {
	t.Helper()
	props, _ := schema["properties"].(map[string]any)
	required := map[string]bool{}
	if req, ok := schema["required"].([]any); ok {
		for _, r := range req {
			required[r.(string)] = true
		}
	}
	seen := map[string]bool{}
	for _, f := range reflect.VisibleFields(goType) {
		if f.Anonymous { // an embedded struct's fields are the data's own (publicevent.Personal)
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		seen[name] = true
		p, ok := props[name].(map[string]any)
		if !ok {
			t.Errorf("%s: schema lacks field %q", typ, name)
			continue
		}
		if omit := strings.Contains(opts, "omitempty"); omit == required[name] {
			t.Errorf("%s: field %q required=%v, but Go omitempty=%v", typ, name, required[name], omit)
		}
		var want any = "string"
		switch ft := f.Type; {
		case ft.Kind() == reflect.Int64 || ft.Kind() == reflect.Int:
			want = "integer"
		case ft == reflect.TypeOf(new(string)): // a personal field: null when erased or withheld
			want = []any{"string", "null"}
		case ft.Kind() == reflect.Slice:
			want = "array"
		case ft.Kind() == reflect.Struct && ft != reflect.TypeOf(time.Time{}):
			want = "" // a nested object: a $ref to its own schema
			if _, ok := p["$ref"]; !ok {
				t.Errorf("%s: field %q is an object without a $ref", typ, name)
			}
		case ft == reflect.TypeOf(time.Time{}) || ft == reflect.TypeOf(&time.Time{}):
			if p["format"] != "date-time" {
				t.Errorf("%s: field %q is a time without format date-time", typ, name)
			}
		}
		if want != "" && !reflect.DeepEqual(p["type"], want) {
			t.Errorf("%s: field %q has type %v, want %s", typ, name, p["type"], want)
		}
	}
	for name := range props {
		if !seen[name] {
			t.Errorf("%s: schema has field %q that Hearth never sends", typ, name)
		}
	}
}
