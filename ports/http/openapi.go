package httpport

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3.1 document of the whole API, written by hand and
// kept true by openapi_test.go, which fails when a route of the server and a
// path of the document disagree.
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the API's OpenAPI document (JSON).
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

// serveOpenAPI answers GET /openapi.json; it needs no key.
func serveOpenAPI(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPI) // the client went away; nothing to answer
	return nil
}
