package httpport

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
)

// downgradeSchemas runs the 3.0 transform on a document with the given
// component schemas and returns them as it left them.
func downgradeSchemas(t *testing.T, schemas string) (map[string]any, error) {
	t.Helper()
	out, err := downgradeOpenAPI([]byte(`{"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": {},
		"components": {"schemas": ` + schemas + `}}`))
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	require.NoError(t, json.Unmarshal(out, &doc))
	require.Equal(t, "3.0.3", doc["openapi"])
	return doc["components"].(map[string]any)["schemas"].(map[string]any), nil
}

// Each 3.1 form becomes the 3.0 form that means the same.
func TestOpenAPI30Schemas(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, in, want string }{
		{"type and null", `{"type": ["string", "null"], "format": "uuid"}`, `{"type": "string", "format": "uuid", "nullable": true}`},
		{"null and type", `{"type": ["null", "object"], "additionalProperties": true}`, `{"type": "object", "additionalProperties": true, "nullable": true}`},
		{"one type in a list", `{"type": ["integer"]}`, `{"type": "integer"}`},
		{"const", `{"type": "string", "const": "order.created"}`, `{"type": "string", "enum": ["order.created"]}`},
		{"examples", `{"type": "string", "examples": ["24h", "90m"]}`, `{"type": "string", "example": "24h"}`},
		{"example kept over examples", `{"type": "string", "example": "1h", "examples": ["24h"]}`, `{"type": "string", "example": "1h"}`},
		{"exclusive bounds", `{"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 12345678901234567890}`,
			`{"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 12345678901234567890, "exclusiveMaximum": true}`},
		{"nullable $ref", `{"anyOf": [{"$ref": "#/components/schemas/P"}, {"type": "null"}], "description": "d"}`,
			`{"allOf": [{"$ref": "#/components/schemas/P"}], "nullable": true, "description": "d"}`},
		{"nullable choice", `{"oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/P"}, {"type": "string"}]}`,
			`{"oneOf": [{"$ref": "#/components/schemas/P"}, {"type": "string"}], "nullable": true}`},
		{"$ref with a description", `{"$ref": "#/components/schemas/P", "description": "d"}`, `{"$ref": "#/components/schemas/P"}`},
		{"$ref with a constraint", `{"$ref": "#/components/schemas/P", "readOnly": true}`,
			`{"allOf": [{"$ref": "#/components/schemas/P"}], "readOnly": true}`},
		{"base64", `{"type": "string", "contentEncoding": "base64"}`, `{"type": "string", "format": "byte"}`},
		{"binary", `{"type": "string", "contentMediaType": "image/png"}`, `{"type": "string", "format": "binary"}`},
		{"comment", `{"type": "string", "$comment": "why"}`, `{"type": "string"}`},
		{"nested, and properties named like keywords", `{"type": "object", "properties": {
				"type": {"type": ["string", "null"]}, "examples": {"type": "array", "items": {"const": 1}},
				"map": {"type": "object", "additionalProperties": {"type": ["boolean", "null"]}},
				"not": {"not": {"type": ["integer", "null"]}}},
				"allOf": [{"properties": {"x": {"examples": [1]}}}]}`,
			`{"type": "object", "properties": {
				"type": {"type": "string", "nullable": true}, "examples": {"type": "array", "items": {"enum": [1]}},
				"map": {"type": "object", "additionalProperties": {"type": "boolean", "nullable": true}},
				"not": {"not": {"type": "integer", "nullable": true}}},
				"allOf": [{"properties": {"x": {"example": 1}}}]}`},
		{"3.0 as it is", `{"type": "string", "nullable": true, "x-go-name": "S"}`, `{"type": "string", "nullable": true, "x-go-name": "S"}`},
	} {
		got, err := downgradeSchemas(t, `{"P": {"type": "object"}, "S": `+c.in+`}`)
		require.NoError(t, err, c.name)
		want, err := json.Marshal(got["S"])
		require.NoError(t, err)
		require.JSONEq(t, c.want, string(want), c.name)
	}
}

// What 3.0 cannot say is refused, every place named, not dropped.
func TestOpenAPI30Refuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, in, want string }{
		{"two types", `{"type": ["string", "integer"]}`, "#/components/schemas/S/type: several types [string integer]"},
		{"null only", `{"type": "null"}`, "#/components/schemas/S/type: a schema of type null only"},
		{"null only in anyOf", `{"anyOf": [{"type": "null"}]}`, "#/components/schemas/S/anyOf: a schema that accepts only null"},
		{"prefixItems", `{"type": "array", "prefixItems": [{"type": "string"}]}`, "#/components/schemas/S/prefixItems: keyword prefixItems"},
		{"deep", `{"properties": {"a/b": {"items": {"$defs": {}}}}}`, "#/components/schemas/S/properties/a~1b/items/$defs: keyword $defs"},
		{"const and enum", `{"const": 1, "enum": [1, 2]}`, "#/components/schemas/S: const beside enum"},
		{"both minimums", `{"minimum": 1, "exclusiveMinimum": 0}`, "#/components/schemas/S/exclusiveMinimum: exclusiveMinimum beside minimum"},
		{"boolean items", `{"type": "array", "items": false}`, "#/components/schemas/S/items: a boolean schema"},
	} {
		_, err := downgradeSchemas(t, `{"S": `+c.in+`}`)
		require.ErrorContains(t, err, c.want, c.name)
	}
	_, err := downgradeSchemas(t, `{"A": {"type": ["null"]}, "B": {"if": {}}}`)
	require.ErrorContains(t, err, "#/components/schemas/A/type")
	require.ErrorContains(t, err, "#/components/schemas/B/if", "every place is named")

	for name, doc := range map[string]string{
		"3.0 input":  `{"openapi": "3.0.3"}`,
		"pathItems":  `{"openapi": "3.1.0", "components": {"pathItems": {"p": {}}}}`,
		"mutual TLS": `{"openapi": "3.1.0", "components": {"securitySchemes": {"m": {"type": "mutualTLS"}}}}`,
	} {
		_, err := downgradeOpenAPI([]byte(doc))
		require.Error(t, err, name)
	}
}

// Schemas are found wherever the document holds them: parameters, headers,
// bodies, responses, callbacks, webhooks (x-webhooks in 3.0); 3.1's fields
// outside schemas go.
func TestOpenAPI30Document(t *testing.T) {
	t.Parallel()
	nullable := `{"type": ["string", "null"]}`
	out, err := downgradeOpenAPI([]byte(`{"openapi": "3.1.1", "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
		"info": {"title": "t", "version": "1", "summary": "s", "license": {"name": "MIT", "identifier": "MIT"}},
		"paths": {"/a/{id}": {"parameters": [{"name": "id", "in": "path", "required": true, "schema": ` + nullable + `}],
			"post": {"parameters": [{"$ref": "#/components/parameters/p", "description": "overridden"}],
				"requestBody": {"content": {"application/json": {"schema": ` + nullable + `,
					"encoding": {"x": {"headers": {"H": {"schema": ` + nullable + `}}}}}}},
				"responses": {"200": {"description": "ok", "headers": {"H": {"schema": ` + nullable + `}},
					"content": {"application/json": {"schema": ` + nullable + `}}}},
				"callbacks": {"c": {"{$request.body#/url}": {"post": {"responses": {"200": {"description": "ok",
					"content": {"application/json": {"schema": ` + nullable + `}}}}}}}}}}},
		"webhooks": {"order.created": {"post": {"requestBody": {"content": {"application/json": {"schema": ` + nullable + `}}},
			"responses": {"200": {"description": "ok"}}}}},
		"components": {"parameters": {"p": {"name": "p", "in": "query", "content": {"application/json": {"schema": ` + nullable + `}}}},
			"headers": {"h": {"schema": ` + nullable + `}}, "requestBodies": {"b": {"content": {"text/plain": {"schema": ` + nullable + `}}}},
			"responses": {"r": {"description": "r", "content": {"application/json": {"schema": ` + nullable + `}}}}}}`))
	require.NoError(t, err)
	text := string(out)
	require.NotContains(t, text, `"null"`, "every nullable schema is 3.0: %s", text)
	require.Equal(t, 11, strings.Count(text, `"nullable": true`), text)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(out, &doc))
	require.Equal(t, "3.0.3", doc["openapi"])
	require.NotContains(t, doc, "jsonSchemaDialect")
	require.NotContains(t, doc, "webhooks")
	require.Contains(t, doc, "x-webhooks")
	require.Equal(t, map[string]any{"title": "t", "version": "1", "license": map[string]any{"name": "MIT"}}, doc["info"])
	params := doc["paths"].(map[string]any)["/a/{id}"].(map[string]any)["post"].(map[string]any)["parameters"]
	require.Equal(t, []any{map[string]any{"$ref": "#/components/parameters/p"}}, params, "nothing beside a 3.0 $ref")
}

// Hearth's own document has a 3.0 form, which kin-openapi (the loader
// oapi-codegen uses) validates as OpenAPI 3.0, and it is served without a
// key beside the 3.1 source.
func TestOpenAPI30OfHearth(t *testing.T) {
	t.Parallel()
	doc, err := OpenAPI30()
	require.NoError(t, err)
	require.NotContains(t, string(doc), `"null"`)
	loaded, err := openapi3.NewLoader().LoadFromData(doc)
	require.NoError(t, err)
	require.Equal(t, "3.0.3", loaded.OpenAPI)
	require.NoError(t, loaded.Validate(t.Context()))

	h, err := NewHandler(Config{Auth: noKeys{}, APIEnabled: false})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	res, err := srv.Client().Get(srv.URL + "/openapi-3.0.json")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "application/json", res.Header.Get("Content-Type"))
	require.Equal(t, "public, max-age=300", res.Header.Get("Cache-Control"))
	require.Equal(t, doc, body)
}
