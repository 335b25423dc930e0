package httpport

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"hearth/domain/text"
	"hearth/domain/uuid"
)

// requestInputs are the types request bodies decode into.
var requestInputs = []func() any{
	func() any { return &customerInput{} },
	func() any { return &staffInput{} },
	func() any { return &catalogItemInput{} },
	func() any { return &createOrderInput{} },
	func() any { return &updateOrderInput{} },
	func() any { return &statusInput{} },
	func() any { return &cancelInput{} },
	func() any { return &assignmentInput{} },
	func() any { return &settlementInput{} },
	func() any { return &serviceRequestInput{} },
	func() any { return &convertInput{} },
	func() any { return &skipInput{} },
	func() any { return &webhookEndpointInput{} },
	func() any { return &rotateSecretInput{} },
}

// FuzzDecode: the request decoder with its input checks never panics; a
// body it refuses is a 400, 413 or 422 problem; a body it accepts holds only
// clean text and canonical ids.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"name":"Ada","phone":"+44 20","email":"ada@example.com","address":"1 Main St\nLondon","notes":"a\tb"}`,
		`{"name":"a\u0000b"}`,
		`{"notes":"a\u0000b"}`,
		"{\"name\":\"a\xffb\"}",
		"{\"content\":\"ok\",\"notes\":\"\xc3\x28\"}",
		`{"customer_id":"0D3F4A6C-1B2E-4C3D-8E9F-0A1B2C3D4E5F","amount_cents":100,"request_id":"X"}`,
		`{"staff_id":"0d3f4a6c-1b2e-4c3d-8e9f-0a1b2c3d4e5f","start_at":"2030-01-01T00:00:00Z","end_at":"2030-01-01T01:00:00Z"}`,
		`{"expected_version":1,"status":"confirmed"}`,
		`{"reason":"line\r\nline"}`,
		`{"url":"https://example.com/hook","event_types":["order.created"],"description":"a\u0007b","enabled":true}`,
		`{"overlap":"24h","expected_version":2}`,
		`{"event_id":"` + uuid.New() + `","reason":"x"}`,
		`{"unknown":1}`, `{"amount_cents":"1"}`, `[]`, `null`, ``, `{`, `{} {}`, `{"name":"\ud800"}`, `{"name":"Bo"}}`, `{"name":"Bo"}]`,
		`{"name":"` + string(bytes.Repeat([]byte("a"), 5000)) + `"}`,
	} {
		for i := range requestInputs {
			f.Add(uint8(i), []byte(seed))
		}
	}
	s := &server{log: slog.New(slog.DiscardHandler)}
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		dst := requestInputs[int(kind)%len(requestInputs)]()
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		r.Body = http.MaxBytesReader(rec, r.Body, 4096)
		err := decode(r, dst)
		if err != nil {
			s.writeError(rec, r, err)
			switch rec.Code {
			case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
			default:
				t.Fatalf("%T %q: %v answered %d", dst, body, err, rec.Code)
			}
			var p problem
			if rec.Header().Get("Content-Type") != "application/problem+json" || json.Unmarshal(rec.Body.Bytes(), &p) != nil || p.Status != rec.Code || p.Type == "" {
				t.Fatalf("%T %q: not a problem: %s", dst, body, rec.Body)
			}
			return
		}
		walkStrings(reflect.ValueOf(dst), "", false, func(field string, v reflect.Value, multiline bool) {
			if p := text.Problem(v.String(), multiline); p != "" {
				t.Fatalf("%T %q: %s accepted: %s", dst, body, field, p)
			}
			if id, ok := uuid.Parse(v.String()); ok && isIDField(field) && id != v.String() {
				t.Fatalf("%T %q: %s = %q is not canonical", dst, body, field, v.String())
			}
		})
	})
}
