package httpport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The OpenAPI 3.0 form of the document. openapi.json (3.1) is the source;
// many generators read only 3.0 (oapi-codegen before v2.8 stops at the first
// `type: [..., "null"]`), so the 3.0 form is derived from it and served
// beside it; client/generate_test.go checks that it generates the same Go
// client as the source. What 3.0 cannot say is refused with the place
// named, never dropped: a document that means something else would generate
// a client that is wrong without saying so.
// docs/api.md tells integrators which form to use with which generator.

// openAPI30 is the 3.0 form, derived once.
var openAPI30 = sync.OnceValues(func() ([]byte, error) { return downgradeOpenAPI(openAPI) })

// OpenAPI30 returns the API's document in OpenAPI 3.0 form (JSON), or why
// openapi.json has none.
func OpenAPI30() ([]byte, error) {
	doc, err := openAPI30()
	return bytes.Clone(doc), err
}

// serveOpenAPI30 answers GET /openapi-3.0.json; it needs no key. Without a
// 3.0 form (a construct 3.0 cannot say) it answers 500 and logs why, and
// the API goes on: the tests (TestOpenAPI30OfHearth, client/) fail on such
// a document long before it ships.
func serveOpenAPI30(w http.ResponseWriter, r *http.Request) error {
	doc, err := openAPI30()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(doc) // the client went away; nothing to answer
	return nil
}

// downgradeOpenAPI turns an OpenAPI 3.1 document into its 3.0.3 form. Every
// construct without a 3.0 form is reported, each with its JSON pointer.
func downgradeOpenAPI(src []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber() // bounds stay exactly as written
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("openapi 3.0 form: decode: %w", err)
	}
	var d downgrade
	d.document(doc)
	if err := errors.Join(d.errs...); err != nil {
		return nil, fmt.Errorf("openapi 3.0 form: %w", err)
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("openapi 3.0 form: encode: %w", err)
	}
	return out.Bytes(), nil
}

// downgrade walks a document along the places the specification puts
// schemas (paths, operations, parameters, bodies, responses, headers,
// components), so that a property that happens to be called "type" or
// "examples" is never taken for a keyword.
type downgrade struct{ errs []error }

func (d *downgrade) fail(at, format string, args ...any) {
	d.errs = append(d.errs, fmt.Errorf("%s: %s", at, fmt.Sprintf(format, args...)))
}

// pointer extends a JSON pointer by one token (RFC 6901 escapes).
func pointer(at string, token string) string {
	return at + "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(token)
}

// each calls f with every object member of node[key] that is itself an
// object, in key order (so errors come in a stable order).
func each(node map[string]any, key, at string, f func(m map[string]any, at string)) {
	members, _ := node[key].(map[string]any)
	for _, k := range slices.Sorted(maps.Keys(members)) {
		if m, ok := members[k].(map[string]any); ok {
			f(m, pointer(pointer(at, key), k))
		}
	}
}

func (d *downgrade) document(doc map[string]any) {
	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		d.fail("#/openapi", "%q is not an OpenAPI 3.1 version", v)
		return
	}
	doc["openapi"] = "3.0.3"
	delete(doc, "jsonSchemaDialect") // 3.0 has one dialect, its own
	if info, ok := doc["info"].(map[string]any); ok {
		delete(info, "summary") // new in 3.1; the description stays
		if license, ok := info["license"].(map[string]any); ok {
			delete(license, "identifier") // new in 3.1; the name stays
		}
	}
	each(doc, "paths", "#", d.pathItem)
	if _, ok := doc["webhooks"]; ok {
		// 3.0 has no webhooks; x-webhooks is where 3.0 tools (Redoc) look.
		each(doc, "webhooks", "#", d.pathItem)
		doc["x-webhooks"] = doc["webhooks"]
		delete(doc, "webhooks")
	}
	components, _ := doc["components"].(map[string]any)
	if components == nil {
		return
	}
	at := "#/components"
	each(components, "schemas", at, d.schema)
	each(components, "parameters", at, d.parameter)
	each(components, "requestBodies", at, d.content)
	each(components, "responses", at, d.response)
	each(components, "headers", at, d.parameter)
	each(components, "callbacks", at, d.callback)
	each(components, "securitySchemes", at, func(s map[string]any, at string) {
		if s["type"] == "mutualTLS" {
			d.fail(at, "security scheme type mutualTLS has no OpenAPI 3.0 form")
		}
	})
	if items, _ := components["pathItems"].(map[string]any); len(items) > 0 {
		d.fail(pointer(at, "pathItems"), "components.pathItems has no OpenAPI 3.0 form")
	}
	delete(components, "pathItems")
}

var operationMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func (d *downgrade) pathItem(item map[string]any, at string) {
	if d.reference(item, at) {
		return
	}
	d.parameters(item, at)
	for _, method := range operationMethods {
		op, ok := item[method].(map[string]any)
		if !ok {
			continue
		}
		opAt := pointer(at, method)
		d.parameters(op, opAt)
		if body, ok := op["requestBody"].(map[string]any); ok {
			d.content(body, pointer(opAt, "requestBody"))
		}
		each(op, "responses", opAt, d.response)
		each(op, "callbacks", opAt, d.callback)
	}
}

func (d *downgrade) callback(cb map[string]any, at string) {
	if d.reference(cb, at) {
		return
	}
	for _, expr := range slices.Sorted(maps.Keys(cb)) {
		if item, ok := cb[expr].(map[string]any); ok && !strings.HasPrefix(expr, "x-") {
			d.pathItem(item, pointer(at, expr))
		}
	}
}

func (d *downgrade) parameters(node map[string]any, at string) {
	list, _ := node["parameters"].([]any)
	for i, p := range list {
		if p, ok := p.(map[string]any); ok {
			d.parameter(p, pointer(pointer(at, "parameters"), strconv.Itoa(i)))
		}
	}
}

// parameter is a parameter or a header: a schema, or content.
func (d *downgrade) parameter(p map[string]any, at string) {
	if d.reference(p, at) {
		return
	}
	if s, ok := p["schema"].(map[string]any); ok {
		d.schema(s, pointer(at, "schema"))
	}
	d.content(p, at)
}

func (d *downgrade) response(r map[string]any, at string) {
	if d.reference(r, at) {
		return
	}
	each(r, "headers", at, d.parameter)
	d.content(r, at)
}

// content is whatever holds a content map: a request body, a response, a
// parameter.
func (d *downgrade) content(node map[string]any, at string) {
	if d.reference(node, at) {
		return
	}
	each(node, "content", at, func(media map[string]any, at string) {
		if s, ok := media["schema"].(map[string]any); ok {
			d.schema(s, pointer(at, "schema"))
		}
		each(media, "encoding", at, func(enc map[string]any, at string) {
			each(enc, "headers", at, d.parameter)
		})
	})
}

// reference reports whether node is a Reference Object. 3.1 lets one carry
// a summary and a description that override the target's; 3.0 allows
// nothing beside $ref, so they go (the target keeps its own).
func (d *downgrade) reference(node map[string]any, at string) bool {
	if _, ok := node["$ref"]; !ok {
		return false
	}
	delete(node, "summary")
	delete(node, "description")
	return true
}

// schemaKeywords are the keywords of a 3.0 Schema Object; a schema keeps
// these (and x- extensions) as they are.
var schemaKeywords = map[string]bool{
	"title": true, "multipleOf": true, "maximum": true, "exclusiveMaximum": true, "minimum": true,
	"exclusiveMinimum": true, "maxLength": true, "minLength": true, "pattern": true, "maxItems": true,
	"minItems": true, "uniqueItems": true, "maxProperties": true, "minProperties": true, "required": true,
	"enum": true, "type": true, "allOf": true, "oneOf": true, "anyOf": true, "not": true, "items": true,
	"properties": true, "additionalProperties": true, "description": true, "format": true, "default": true,
	"nullable": true, "discriminator": true, "readOnly": true, "writeOnly": true, "xml": true,
	"externalDocs": true, "example": true, "deprecated": true, "$ref": true,
}

// annotations may stand beside a $ref and go with it in 3.0 (which ignores
// whatever is beside a $ref) without changing what the schema accepts.
var annotations = map[string]bool{"description": true, "title": true, "$comment": true}

// schema rewrites one JSON Schema 2020-12 schema (OpenAPI 3.1) into a 3.0
// Schema Object, in place, then its subschemas.
func (d *downgrade) schema(s map[string]any, at string) {
	if _, ok := s["$ref"]; ok && len(s) > 1 {
		constraints := false
		for k := range s {
			constraints = constraints || (k != "$ref" && !annotations[k])
		}
		if !constraints {
			for k := range s {
				if k != "$ref" {
					delete(s, k)
				}
			}
			return
		}
		// A $ref with constraints beside it: 3.0 says the same with allOf.
		s["allOf"] = append([]any{map[string]any{"$ref": s["$ref"]}}, listOf(s["allOf"])...)
		delete(s, "$ref")
	}
	delete(s, "$comment")
	d.types(s, at)
	d.nullMembers(s, at, "anyOf")
	d.nullMembers(s, at, "oneOf")
	if v, ok := s["const"]; ok {
		if _, both := s["enum"]; both {
			d.fail(at, "const beside enum has no OpenAPI 3.0 form")
		}
		s["enum"] = []any{v}
		delete(s, "const")
	}
	if list, ok := s["examples"].([]any); ok {
		if _, has := s["example"]; !has && len(list) > 0 {
			s["example"] = list[0] // 3.0 keeps one example per schema
		}
		delete(s, "examples")
	}
	d.exclusive(s, at, "exclusiveMinimum", "minimum")
	d.exclusive(s, at, "exclusiveMaximum", "maximum")
	if _, ok := s["contentEncoding"]; ok {
		if s["contentEncoding"] == "base64" && s["format"] == nil {
			s["format"] = "byte"
		}
		delete(s, "contentEncoding")
		delete(s, "contentMediaType")
	}
	if _, ok := s["contentMediaType"]; ok {
		if s["format"] == nil {
			s["format"] = "binary" // raw content, as 3.0 says it
		}
		delete(s, "contentMediaType")
	}
	for _, k := range slices.Sorted(maps.Keys(s)) {
		if !schemaKeywords[k] && !strings.HasPrefix(k, "x-") {
			d.fail(pointer(at, k), "keyword %s has no OpenAPI 3.0 form", k)
		}
	}

	each(s, "properties", at, d.schema)
	for _, k := range []string{"items", "not", "additionalProperties"} {
		switch sub := s[k].(type) {
		case map[string]any:
			d.schema(sub, pointer(at, k))
		case bool:
			if k != "additionalProperties" {
				d.fail(pointer(at, k), "a boolean schema has no OpenAPI 3.0 form here")
			}
		case nil:
		default:
			d.fail(pointer(at, k), "%T has no OpenAPI 3.0 form here", sub)
		}
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		for i, sub := range listOf(s[k]) {
			if sub, ok := sub.(map[string]any); ok {
				d.schema(sub, pointer(pointer(at, k), strconv.Itoa(i)))
			}
		}
	}
}

func listOf(v any) []any {
	list, _ := v.([]any)
	return list
}

// types turns a list of types into one type and nullable: ["string",
// "null"] is type: string, nullable: true. 3.0 has no schema that accepts
// only null, nor one of several types.
func (d *downgrade) types(s map[string]any, at string) {
	var list []any
	switch t := s["type"].(type) {
	case []any:
		list = t
	case string:
		list = []any{t}
	default:
		return
	}
	var kinds []string
	for _, t := range list {
		if t == "null" {
			s["nullable"] = true
			continue
		}
		if name, ok := t.(string); ok {
			kinds = append(kinds, name)
		}
	}
	switch len(kinds) {
	case 0:
		d.fail(pointer(at, "type"), "a schema of type null only has no OpenAPI 3.0 form")
	case 1:
		s["type"] = kinds[0]
	default:
		d.fail(pointer(at, "type"), "several types %v have no OpenAPI 3.0 form", kinds)
	}
}

// nullMembers turns anyOf/oneOf [X, {type: null}] into nullable: true:
// with one member left it becomes allOf [X] (the 3.0 way to make a $ref
// nullable), with several it stays a choice among them.
func (d *downgrade) nullMembers(s map[string]any, at, key string) {
	list, ok := s[key].([]any)
	if !ok {
		return
	}
	var rest []any
	for _, m := range list {
		if isNullSchema(m) {
			s["nullable"] = true
			continue
		}
		rest = append(rest, m)
	}
	if len(rest) == len(list) {
		return
	}
	switch len(rest) {
	case 0:
		d.fail(pointer(at, key), "a schema that accepts only null has no OpenAPI 3.0 form")
	case 1:
		delete(s, key)
		s["allOf"] = append(listOf(s["allOf"]), rest[0])
	default:
		s[key] = rest
	}
}

// isNullSchema reports whether m is {type: null} (or a type list of null
// alone), with nothing but annotations beside it.
func isNullSchema(m any) bool {
	s, ok := m.(map[string]any)
	if !ok {
		return false
	}
	switch t := s["type"].(type) {
	case string:
		if t != "null" {
			return false
		}
	case []any:
		if len(t) != 1 || t[0] != "null" {
			return false
		}
	default:
		return false
	}
	for k := range s {
		if k != "type" && !annotations[k] {
			return false
		}
	}
	return true
}

// exclusive turns a 3.1 numeric exclusive bound into the 3.0 pair of the
// bound and a boolean.
func (d *downgrade) exclusive(s map[string]any, at, exclusive, inclusive string) {
	n, ok := s[exclusive].(json.Number)
	if !ok {
		return // absent, or already the 3.0 boolean
	}
	if _, both := s[inclusive]; both {
		d.fail(pointer(at, exclusive), "%s beside %s has no OpenAPI 3.0 form", exclusive, inclusive)
		return
	}
	s[inclusive] = n
	s[exclusive] = true
}
