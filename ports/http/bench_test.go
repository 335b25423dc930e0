package httpport

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkCreateOrder is the HTTP layer's cost of one write (routing,
// auth, limits, decoding, the use case on the in-memory store, the answer),
// without a database: go test -bench CreateOrder ./ports/http/.
func BenchmarkCreateOrder(b *testing.B) {
	f := newFakeApp(b)
	body := `{"customer_id":"` + f.customer + `","amount_cents":12000}`
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+f.op)
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated {
			b.Fatal(rec.Code, rec.Body.String())
		}
	}
}
