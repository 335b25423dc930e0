package httpport

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/domain/uuid"
)

// A method a path does not take answers 405 with Allow listing the ones it
// does (RFC 9110, 15.5.6), not the 404 of a path that names nothing: a
// client that sends DELETE /v1/orders/{id} must not read "no such order"
// into a 404, and a client that got the method wrong learns which to use.
// A path no method takes stays 404.
func TestAMethodAPathDoesNotTakeAnswers405WithAllow(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	id := f.createOrder()
	for name, tc := range map[string]struct{ method, path, key, allow string }{
		"DELETE of an order":          {http.MethodDelete, "/v1/orders/" + id, f.op, "GET, HEAD, PATCH"},
		"DELETE of an unknown order":  {http.MethodDelete, "/v1/orders/" + uuid.New(), f.op, "GET, HEAD, PATCH"},
		"PUT of the orders":           {http.MethodPut, "/v1/orders", f.op, "GET, HEAD, POST"},
		"GET of a status change":      {http.MethodGet, "/v1/orders/" + id + "/status", f.op, "POST"},
		"POST of an assignment":       {http.MethodPost, "/v1/orders/" + id + "/assignment", f.op, "PUT"},
		"OPTIONS of the orders":       {http.MethodOptions, "/v1/orders", f.op, "GET, HEAD, POST"},
		"without a key":               {http.MethodDelete, "/v1/orders/" + id, "", "GET, HEAD, PATCH"},
		"POST of the health endpoint": {http.MethodPost, "/healthz", "", "GET, HEAD"},
	} {
		a := f.do(tc.method, tc.path, tc.key, "")
		require.Equal(t, http.StatusMethodNotAllowed, a.Code, "%s: %s", name, a.Body.String())
		require.Equal(t, "application/problem+json", a.Header().Get("Content-Type"), name)
		require.Equal(t, "/problems/method-not-allowed", a.body["type"], name)
		require.Equal(t, tc.allow, a.Header().Get("Allow"), name)
		require.Contains(t, a.body["detail"], tc.allow, name)
	}
	a := f.do(http.MethodDelete, "/v1/nothing-here", f.op, "")
	require.Equal(t, http.StatusNotFound, a.Code, a.Body.String())
	require.Equal(t, "/problems/not-found", a.body["type"])
	require.Empty(t, a.Header().Get("Allow"))
}

// A body sent with a Content-Encoding (gzip, deflate) is refused for that,
// 415 with Accept-Encoding naming the one coding the API reads (RFC 9110,
// 15.5.16), rather than parsed as it arrives: compressed, it answered "malformed
// JSON at byte 1: invalid character '\x1f'", and a plain body labelled
// gzip was taken as if the label were not there. identity is no coding.
func TestABodyWithAContentEncodingIsRefused(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := zw.Write([]byte(`{"customer_id":"` + f.customer + `","amount_cents":1000}`))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	before := f.tx.Position()
	for name, tc := range map[string]struct{ body, coding string }{
		"gzipped":                {gz.String(), "gzip"},
		"plain, labelled gzip":   {`{"customer_id":"` + f.customer + `","amount_cents":1000}`, "gzip"},
		"plain, labelled br":     {`{"customer_id":"` + f.customer + `","amount_cents":1000}`, "br"},
		"identity, then deflate": {`{"customer_id":"` + f.customer + `","amount_cents":1000}`, "identity, deflate"},
	} {
		a := f.do(http.MethodPost, "/v1/orders", f.op, tc.body, "Content-Encoding", tc.coding)
		require.Equal(t, http.StatusUnsupportedMediaType, a.Code, "%s: %s", name, a.Body.String())
		require.Equal(t, "/problems/unsupported-content-encoding", a.body["type"], name)
		require.Equal(t, "identity", a.Header().Get("Accept-Encoding"), name)
	}
	require.Equal(t, before, f.tx.Position(), "nothing written")
	a := f.do(http.MethodPost, "/v1/orders", f.op, `{"customer_id":"`+f.customer+`","amount_cents":1000}`, "Content-Encoding", "identity")
	require.Equal(t, http.StatusCreated, a.Code, a.Body.String())
}

// RFC 3339's offset hour is 00 to 23; Go's parser takes 24 as well, and
// read 2030-01-02T00:00:00+24:00 as the first of January. A client that
// wrote it meant something else (24:00 is a time of day, not an offset):
// it is refused naming the field, in a body and in a query alike.
func TestAnOffsetOf24HoursIsNotRFC3339(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	before := f.tx.Position()
	for _, offset := range []string{"+24:00", "-24:00", "+24:30"} {
		a := f.do(http.MethodPost, "/v1/orders", f.op, `{"customer_id":"`+f.customer+`","amount_cents":1,`+
			`"scheduled_start_at":"2030-01-02T00:00:00`+offset+`","scheduled_end_at":"2030-01-03T01:00:00Z"}`)
		require.Equal(t, http.StatusBadRequest, a.Code, "%s: %s", offset, a.Body.String())
		require.Contains(t, a.body["detail"], "scheduled_start_at", offset)

		q := url.Values{"from": {"2030-01-02T00:00:00" + offset}}
		a = f.do(http.MethodGet, "/v1/orders?"+q.Encode(), f.op, "")
		require.Equal(t, http.StatusBadRequest, a.Code, "%s: %s", offset, a.Body.String())
		require.Contains(t, a.body["detail"], "from", offset)
	}
	require.Equal(t, before, f.tx.Position(), "nothing written")
	a := f.do(http.MethodPost, "/v1/orders", f.op, `{"customer_id":"`+f.customer+`","amount_cents":1,`+
		`"scheduled_start_at":"2030-01-02T00:00:00+23:59","scheduled_end_at":"2030-01-03T01:00:00-23:59"}`)
	require.Equal(t, http.StatusCreated, a.Code, a.Body.String())
}

// A CONNECT names a host, not a path (an open-proxy probe): net/http's mux
// matches no pattern for it, not even the catch-all, and answered its own
// text/plain "404 page not found". It is a problem like any other answer.
func TestAConnectIsAnsweredWithAProblem(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	req := httptest.NewRequest(http.MethodConnect, "example.com:443", nil)
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusNotFound, rec.Code, rec.Body.String())
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"), rec.Body.String())
	var p problem
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), rec.Body.String())
	require.Equal(t, "/problems/not-found", p.Type)
	require.Contains(t, p.Detail, "CONNECT example.com:443")
}

// A body that begins with a UTF-8 byte order mark (what PowerShell's
// Out-File -Encoding utf8 writes) is refused saying so: JSON texts must
// not carry one (RFC 8259, 8.1), and encoding/json's own words for it,
// "invalid character 'ï' looking for beginning of value", name a character
// the client never wrote.
func TestABodyWithAByteOrderMarkIsRefusedSayingSo(t *testing.T) {
	t.Parallel()
	for _, body := range []string{"\uFEFF{\"name\":\"Bo\"}", "\uFEFF", "\uFEFF\n"} {
		status, p, panicked := decodeAnswer(body, &customerInput{})
		require.Nil(t, panicked, "%q", body)
		require.Equal(t, http.StatusBadRequest, status, "%q", body)
		require.Equal(t, "/problems/malformed-request", p.Type, "%q", body)
		require.Contains(t, p.Detail, "byte order mark", "%q", body)
	}
}
