package webhooks

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"hearth/domain/webhook"
)

func newTestSender(t *testing.T, timeout time.Duration, allowPrivate bool) *Sender {
	t.Helper()
	s, err := NewSender(SenderConfig{Timeout: timeout, AllowPrivate: allowPrivate})
	require.NoError(t, err)
	return s
}

// countingServer counts the requests it gets and answers with h.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// A delivery carries the Standard Webhooks headers, signed over id,
// timestamp and body.
func TestSendSigns(t *testing.T) {
	t.Parallel()
	var got http.Header
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() })
	secret := webhook.NewSecret()
	out := newTestSender(t, time.Second, true).Send(t.Context(), srv.URL, []string{secret}, "evt-1", []byte(`{"a":1}`))
	require.True(t, out.OK(), out.Err)
	require.Equal(t, http.StatusOK, out.Status)
	require.Equal(t, "evt-1", got.Get("webhook-id"))
	ts := got.Get("webhook-timestamp")
	require.NotEmpty(t, ts)
	want, err := webhook.Signature([]string{secret}, "evt-1", mustInt(t, ts), []byte(`{"a":1}`))
	require.NoError(t, err)
	require.Equal(t, want, got.Get("webhook-signature"))
}

// Without AllowPrivate, the dialer refuses loopback, private and link-local
// addresses, whether the URL names them or a name resolves to them (the
// check is on the address dialled), and the target gets nothing.
func TestSendRefusesPrivateAddresses(t *testing.T) {
	t.Parallel()
	srv, n := countingServer(t, func(http.ResponseWriter, *http.Request) {})
	s := newTestSender(t, time.Second, false)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	for _, target := range []string{srv.URL, "http://localhost:" + u.Port() + "/"} {
		out := s.Send(t.Context(), target, []string{webhook.NewSecret()}, "evt", []byte("{}"))
		require.False(t, out.OK(), target)
		require.Contains(t, out.Err, "refused: the receiver's address is a private address", target)
		require.NotContains(t, out.Err, "127.0.0.1", "the log the merchant reads names no address of the network")
		require.Zero(t, out.Status)
	}
	require.Zero(t, n.Load(), "nothing reached the target")

	require.ErrorContains(t, s.CheckTarget(t.Context(), "http://169.254.169.254/latest"), "169.254.169.254 is a private address")
	require.ErrorContains(t, s.CheckTarget(t.Context(), "http://[64:ff9b::a9fe:a9fe]/"), "is a private address", "NAT64")
	require.ErrorContains(t, s.CheckTarget(t.Context(), "http://[64:ff9b:1::a00:1]/"), "is a private address", "NAT64, local use")
	err = s.CheckTarget(t.Context(), "http://localhost:9/")
	require.ErrorContains(t, err, "localhost resolves to a private address")
	for _, addr := range []string{"127.0.0.1", "::1", "loopback"} {
		require.NotContains(t, err.Error(), addr, "the answer does not say what a name resolved to")
	}
	require.NoError(t, s.CheckTarget(t.Context(), "https://203.0.113.7/hook"))
	require.NoError(t, newTestSender(t, time.Second, true).CheckTarget(t.Context(), srv.URL), "allowed by configuration")
}

// A redirect is the receiver's answer, and a failure: it is not followed.
func TestSendDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	target, reached := countingServer(t, func(http.ResponseWriter, *http.Request) {})
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	})
	out := newTestSender(t, time.Second, true).Send(t.Context(), srv.URL, []string{webhook.NewSecret()}, "evt", []byte("{}"))
	require.False(t, out.OK())
	require.Equal(t, http.StatusTemporaryRedirect, out.Status)
	require.Contains(t, out.Err, "redirects are not followed")
	require.Zero(t, reached.Load())
}

// An attempt is bounded by the timeout.
func TestSendTimesOut(t *testing.T) {
	t.Parallel()
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // net/http notices a client gone only once the body is read
		<-r.Context().Done()
	})
	out := newTestSender(t, 50*time.Millisecond, true).Send(t.Context(), srv.URL, []string{webhook.NewSecret()}, "evt", []byte("{}"))
	require.False(t, out.OK())
	require.Contains(t, out.Err, "no answer within 50ms")
}

// A failed answer's error keeps the start of its body.
func TestSendReportsTheAnswer(t *testing.T) {
	t.Parallel()
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "database down"+strings.Repeat("!", 1000), http.StatusServiceUnavailable)
	})
	out := newTestSender(t, time.Second, true).Send(context.Background(), srv.URL, []string{webhook.NewSecret()}, "evt", []byte("{}"))
	require.Equal(t, http.StatusServiceUnavailable, out.Status)
	require.True(t, strings.HasPrefix(out.Err, "HTTP 503: database down!!!"), out.Err)
	require.LessOrEqual(t, len(out.Err), 300)
	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGone) }))
	defer gone.Close()
	require.True(t, newTestSender(t, time.Second, true).Send(context.Background(), gone.URL, []string{webhook.NewSecret()}, "evt", nil).Gone())
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return n
}

// A receiver's words come back as text the delivery log can store (valid
// UTF-8, no NUL), and Brief leaves them out.
func TestSendKeepsTheReceiversWordsStorable(t *testing.T) {
	t.Parallel()
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("redirect") != "" {
			w.Header()["Location"] = []string{"/elsewhere?notes=mat\xff"}
			w.WriteHeader(http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = io.WriteString(w, "refused \x00notes\xfe: key under the mat")
	})
	s := newTestSender(t, time.Second, true)
	secrets := []string{webhook.NewSecret()}
	out := s.Send(t.Context(), srv.URL, secrets, "evt-1", []byte(`{}`))
	require.Equal(t, "HTTP 422: refused notes: key under the mat", out.Err)
	require.Equal(t, "HTTP 422", out.Brief())
	out = s.Send(t.Context(), srv.URL+"?redirect=1", secrets, "evt-1", []byte(`{}`))
	require.Equal(t, "HTTP 302: redirects are not followed (Location: /elsewhere?notes=mat)", out.Err)
	require.Equal(t, "HTTP 302: redirects are not followed", out.Brief())
}

// A receiver that answers something else than HTTP: net/http's error
// quotes what it sent, which stays in the delivery's own error; Brief says
// only that no HTTP answer came.
func TestSendNotHTTPKeepsTheReceiversWordsInErr(t *testing.T) {
	t.Parallel()
	url := notHTTP(t, `{"name":"Jane Customer","phone":"+447700900123"}`)
	out := newTestSender(t, time.Second, true).Send(t.Context(), url, []string{webhook.NewSecret()}, "evt-1", []byte(`{}`))
	require.Zero(t, out.Status)
	require.Contains(t, out.Err, "447700900123")
	require.Equal(t, "no HTTP answer (the delivery's error says what came instead)", out.Brief())
}

// What a delivery keeps of a receiver's answer is bounded (maxStoredError
// bytes, cut at a character): the log returns it in every page. A
// redirect's Location is kept that long at most, and an answer's headers
// are read up to maxResponseHeader only.
func TestSendBoundsTheRedirectLocationItKeeps(t *testing.T) {
	t.Parallel()
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		n := 32 << 10 // within maxResponseHeader
		if r.URL.Query().Get("huge") != "" {
			n = 1 << 20
		}
		w.Header().Set("Location", "/elsewhere?"+strings.Repeat("é", n/2))
		w.WriteHeader(http.StatusFound)
	})
	s := newTestSender(t, 5*time.Second, true)
	out := s.Send(t.Context(), srv.URL, []string{webhook.NewSecret()}, "evt-1", []byte(`{}`))
	require.Equal(t, http.StatusFound, out.Status)
	require.LessOrEqual(t, len(out.Err), maxStoredError, "the delivery's error keeps %d bytes of the receiver's Location", len(out.Err))
	require.True(t, utf8.ValidString(out.Err), "cut at a character")
	require.True(t, strings.HasPrefix(out.Err, "HTTP 302: redirects are not followed (Location: /elsewhere?éé"), out.Err)
	require.True(t, strings.HasSuffix(out.Err, "…"), "says it was cut: %s", out.Err)

	out = s.Send(t.Context(), srv.URL+"?huge=1", []string{webhook.NewSecret()}, "evt-1", []byte(`{}`))
	require.Zero(t, out.Status, "headers past maxResponseHeader are no answer")
	require.LessOrEqual(t, len(out.Err), maxStoredError)
}

// A receiver that answers something else than HTTP, at length: the
// delivery keeps maxStoredError bytes of net/http's error quoting it.
func TestSendBoundsTheNonHTTPAnswerItKeeps(t *testing.T) {
	t.Parallel()
	url := notHTTP(t, strings.Repeat("x", 16<<10)) // within maxResponseHeader, no colon, no HTTP
	out := newTestSender(t, 5*time.Second, true).Send(t.Context(), url, []string{webhook.NewSecret()}, "evt-1", []byte(`{}`))
	require.Zero(t, out.Status)
	require.NotEmpty(t, out.Err)
	require.LessOrEqual(t, len(out.Err), maxStoredError,
		"the delivery's error keeps %d bytes of what the receiver sent instead of HTTP", len(out.Err))
}

// notHTTP is the URL of a receiver that answers every request with line,
// which is not HTTP.
func notHTTP(t *testing.T, line string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = c.Read(make([]byte, 4096))
				_, _ = io.WriteString(c, line+"\r\n\r\n")
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// A receiver's name that does not resolve: the delivery's error says so,
// naming neither the name server Hearth asked nor the sockets it asked
// from, addresses of Hearth's own network (as RefusedError names none).
func TestSendNamesNoAddressOfTheNameServer(t *testing.T) {
	t.Parallel()
	nxdomain := nameServer(t)
	closed := nameServer(t)
	for _, dialled := range []string{nxdomain.LocalAddr().String(), closed.LocalAddr().String()} {
		var asked atomic.Pointer[string]
		s, err := NewSender(SenderConfig{Timeout: 5 * time.Second, Resolver: &net.Resolver{PreferGo: true,
			Dial: func(ctx context.Context, _, address string) (net.Conn, error) {
				asked.Store(&address)
				var d net.Dialer
				return d.DialContext(ctx, "udp", dialled)
			}}})
		require.NoError(t, err)
		if dialled == closed.LocalAddr().String() {
			require.NoError(t, closed.Close()) // a name server that is down: the read is refused
		}
		out := s.Send(t.Context(), "https://hooks.merchant.invalid/hearth", []string{webhook.NewSecret()}, "evt-1", []byte(`{}`))
		require.Zero(t, out.Status)
		require.Contains(t, out.Err, "hooks.merchant.invalid", "it names the receiver's name")
		require.NotNil(t, asked.Load(), "the resolver was asked")
		server, _, err := net.SplitHostPort(*asked.Load())
		require.NoError(t, err)
		require.NotContains(t, out.Err, server, "the delivery's error names the name server")
		require.NotContains(t, out.Err, "127.0.0.1", "the delivery's error names the sockets of the lookup")
	}
}

// nameServer is a UDP name server on loopback that answers every query
// NXDOMAIN (the query sent back as a response: QR, RA, RCODE 3).
func nameServer(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if n < 12 {
				continue
			}
			buf[2] |= 0x80
			buf[3] = 0x80 | 3
			_, _ = c.WriteToUDP(buf[:n], from)
		}
	}()
	return c
}

// A receiver that breaks the connection: the delivery's error says so,
// naming the receiver's address but not the local end of the connection,
// Hearth's own address in its network (net.OpError's Source).
func TestSendNamesNoAddressOfItsOwnSocket(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	clients := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		clients <- c.RemoteAddr().String()
		_, _ = c.Read(make([]byte, 4096))
		_ = c.(*net.TCPConn).SetLinger(0) // a reset, not a close
		_ = c.Close()
	}()
	out := newTestSender(t, 5*time.Second, true).Send(t.Context(), "http://"+ln.Addr().String()+"/hooks", []string{webhook.NewSecret()}, "evt-1", []byte(`{}`))
	require.Zero(t, out.Status)
	require.Contains(t, out.Err, "connection reset by peer")
	require.Contains(t, out.Err, ln.Addr().String(), "it names the receiver's address")
	require.NotContains(t, out.Err, <-clients, "the delivery's error names the sender's own end of the connection")
}

// An IPv6 literal with a zone is judged as the address it is: "[::%25lo]"
// is the unspecified address, which connects to this host, whatever zone
// follows it (netip's IsUnspecified and Prefix.Contains see no address
// with a zone).
func TestSendRefusesAddressesWithAZone(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "[::]:0")
	if err != nil {
		t.Skipf("no IPv6 on this host: %v", err)
	}
	var n atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { n.Add(1) }), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	s := newTestSender(t, 2*time.Second, false)
	for _, target := range []string{"http://[::%25lo]:" + port + "/", "http://[64:ff9b::a00:1%25lo]:" + port + "/"} {
		require.ErrorContains(t, s.CheckTarget(t.Context(), target), "is a private address", target)
		out := s.Send(t.Context(), target, []string{webhook.NewSecret()}, "evt-1", []byte(`{}`))
		require.Contains(t, out.Err, "refused: the receiver's address is a private address", target)
	}
	require.Zero(t, n.Load(), "nothing reached this host")
}
