package webhooks

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"hearth/domain/webhook"
	"hearth/internal/tracing"
)

// UserAgent is the User-Agent of every delivery.
const UserAgent = "Hearth-Webhooks/1"

// Sender makes the HTTP POSTs of deliveries: signed (webhook.Signature),
// bounded by a timeout, never following a redirect, and never reaching an
// address webhook.Refused names unless AllowPrivate.
type Sender struct {
	client       *http.Client
	resolver     *net.Resolver
	timeout      time.Duration
	allowPrivate bool
	now          func() time.Time
}

// SenderConfig is what NewSender needs.
type SenderConfig struct {
	// Timeout bounds one attempt, from dialling to the end of the answer.
	// Required: its one default is the configuration's (cmd/app
	// Config.WebhookTimeout, WEBHOOK_TIMEOUT).
	Timeout time.Duration
	// AllowPrivate lets deliveries reach loopback, private and link-local
	// addresses (WEBHOOK_ALLOW_PRIVATE; tests, and receivers inside one's own
	// network).
	AllowPrivate bool
	// Now is the clock of the webhook-timestamp header. Defaults to
	// time.Now.
	Now func() time.Time
	// Resolver resolves the receivers' names, when an endpoint is saved
	// (CheckTarget) and at every connection. Defaults to
	// net.DefaultResolver.
	Resolver *net.Resolver
}

// NewSender returns a sender.
func NewSender(cfg SenderConfig) (*Sender, error) {
	if cfg.Timeout <= 0 {
		return nil, errors.New("webhooks.NewSender: Timeout is required")
	}
	s := &Sender{timeout: cfg.Timeout, allowPrivate: cfg.AllowPrivate, now: cfg.Now, resolver: cmp.Or(cfg.Resolver, net.DefaultResolver)}
	if s.now == nil {
		s.now = time.Now
	}
	dialer := &net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second, Resolver: s.resolver}
	if !cfg.AllowPrivate {
		// The check runs on the address actually dialled, after name
		// resolution: a name that resolved to a public address when the
		// endpoint was created and to a private one now (DNS rebinding) is
		// refused all the same.
		dialer.Control = refuseAddresses
	}
	s.client = &http.Client{
		Transport: &http.Transport{
			// No proxy: through one, the dialled address would be the
			// proxy's, and the check would see nothing of the target.
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   cfg.Timeout,
			ResponseHeaderTimeout: cfg.Timeout,
			// A receiver's answer is read for its status, and a little of
			// its body: headers of megabytes (net/http's default allows
			// 10 MB) would only cost memory, per attempt in flight.
			MaxResponseHeaderBytes: maxResponseHeader,
			MaxIdleConns:           256,
			MaxIdleConnsPerHost:    inFlightPerEndpoint,
			IdleConnTimeout:        90 * time.Second,
			ForceAttemptHTTP2:      true,
		},
		// A 3xx is the receiver's answer, and a failure: following it would
		// send the event (and a valid signature) somewhere the operator did
		// not register, maybe inside the network.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return s, nil
}

// refuseAddresses is the dialer's Control: it refuses to connect to an
// address webhook.Refused names.
func refuseAddresses(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return err
	}
	if reason := webhook.Refused(addr); reason != "" {
		return &RefusedError{Addr: addr, Reason: reason}
	}
	return nil
}

// RefusedError is a target address deliveries may not reach. Its message
// names neither the address nor its kind: the merchant reads it (the API's
// 422, the delivery log), and the address a name resolved to, inside
// Hearth's network, is none of its business.
type RefusedError struct {
	Addr   netip.Addr
	Reason string // webhook.Refused's
}

func (e *RefusedError) Error() string {
	return "a private address; deliveries to it are refused (WEBHOOK_ALLOW_PRIVATE)"
}

// CheckTarget refuses a URL whose host is an address deliveries may not
// reach, or a name that resolves to one (command.TargetCheck). A name that
// does not resolve now is accepted: the dialer checks every address it
// connects to anyway.
func (s *Sender) CheckTarget(ctx context.Context, rawURL string) error {
	if s.allowPrivate {
		return nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	host := u.Hostname()
	if addr, err := netip.ParseAddr(host); err == nil {
		if reason := webhook.Refused(addr); reason != "" {
			return fmt.Errorf("%s is %w", host, &RefusedError{Addr: addr, Reason: reason})
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	addrs, err := s.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if reason := webhook.Refused(a); reason != "" {
			return fmt.Errorf("%s resolves to %w", host, &RefusedError{Addr: a, Reason: reason})
		}
	}
	return nil
}

// Outcome is what one attempt gave.
type Outcome struct {
	// Status is the receiver's HTTP status; 0 when it gave none.
	Status  int
	Latency time.Duration
	// Err says why the attempt failed; "" when it succeeded (a 2xx).
	Err string
	// noAnswer is Brief's text for an attempt that got no HTTP answer:
	// Err then holds the transport's error, which may quote what the
	// receiver sent instead of HTTP.
	noAnswer string
}

// OK reports a delivered attempt.
func (o Outcome) OK() bool { return o.Err == "" }

// Brief says why the attempt failed without the receiver's words (its
// answer's body, its Location): what goes beyond the delivery's own row
// (the endpoint's disabled_reason, the errors of its other deliveries, the
// log, the span). A receiver's answer often quotes the payload it refused,
// personal data that an erasure removes from the delivery's row only.
func (o Outcome) Brief() string {
	switch {
	case o.OK():
		return ""
	case o.Status >= 300 && o.Status < 400:
		return fmt.Sprintf("HTTP %d: redirects are not followed", o.Status)
	case o.Status != 0:
		return fmt.Sprintf("HTTP %d", o.Status)
	case o.noAnswer != "":
		return o.noAnswer
	}
	return o.Err
}

// Gone reports a receiver that answered 410 Gone: its endpoint is disabled
// at once (unless the attempt was a test ping).
func (o Outcome) Gone() bool { return o.Status == http.StatusGone }

const (
	// maxErrorBody is how much of a failed answer's body the log keeps.
	maxErrorBody = 256
	// maxStoredError bounds, in bytes, each error text a delivery or an
	// endpoint records (storable; failPending's note may follow one): the
	// delivery log returns it in every page, for WEBHOOK_DELIVERY_KEEP.
	maxStoredError = 512
	// maxResponseHeader bounds a receiver's answer's headers.
	maxResponseHeader = 64 << 10
)

// Send POSTs body to rawURL, signed with secrets, as event id. Its
// outcome's texts are storable, whatever the receiver or the transport
// said.
func (s *Sender) Send(ctx context.Context, rawURL string, secrets []string, id string, body []byte) Outcome {
	out := s.send(ctx, rawURL, secrets, id, body)
	out.Err, out.noAnswer = storable(out.Err), storable(out.noAnswer)
	return out
}

func (s *Sender) send(ctx context.Context, rawURL string, secrets []string, id string, body []byte) Outcome {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	ts := s.now().Unix()
	sig, err := webhook.Signature(secrets, id, ts, body)
	if err != nil {
		return Outcome{Err: err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return Outcome{Err: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sig)
	// The delivery's trace context (tracing on): the receiver's spans may
	// join the write's trace. The signature does not cover it.
	tracing.InjectHeader(ctx, req.Header)
	res, err := s.client.Do(req)
	if err != nil {
		out := Outcome{Latency: time.Since(start), Err: s.describe(ctx, err)}
		if out.noAnswer = out.Err; !errors.As(err, new(*RefusedError)) && !timedOut(ctx, err) {
			out.noAnswer = "no HTTP answer (the delivery's error says what came instead)"
		}
		return out
	}
	snippet, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10)) // so that the connection can be reused
	_ = res.Body.Close()
	out := Outcome{Status: res.StatusCode, Latency: time.Since(start)}
	switch {
	case res.StatusCode >= 200 && res.StatusCode < 300:
	case res.StatusCode >= 300 && res.StatusCode < 400:
		out.Err = fmt.Sprintf("HTTP %d: redirects are not followed (Location: %s)", res.StatusCode, receiverText(res.Header.Get("Location")))
	default:
		out.Err = fmt.Sprintf("HTTP %d", res.StatusCode)
		if b := strings.TrimSpace(receiverText(string(snippet))); b != "" {
			out.Err += ": " + b
		}
	}
	return out
}

// storable is an error text as a delivery (or its endpoint's
// disabled_reason) keeps it: receiverText's, at most maxStoredError bytes
// (cut at a character, ending in "…" when cut). Every text the dispatcher
// records goes through it (recordStatements), as every Outcome of Send
// does: a transport's error may quote what a receiver sent (a TLS
// certificate's names, a line that is not HTTP), unbounded and with any
// byte in it.
func storable(s string) string {
	s = receiverText(s)
	if len(s) <= maxStoredError {
		return s
	}
	const ellipsis = "…"
	cut := maxStoredError - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// receiverText is text from a receiver's answer as the delivery log can
// store it: valid UTF-8 without control characters (but tabs and line
// breaks). Postgres refuses a NUL byte or invalid UTF-8 in text, and the
// round that records the attempt would fail with it, every time: the
// delivery would be sent again for ever, never failed nor retried on its
// schedule.
func receiverText(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' || !unicode.IsControl(r) {
			return r
		}
		return -1
	}, strings.ToValidUTF8(s, ""))
}

// timedOut reports a request that got no answer within its time.
func timedOut(ctx context.Context, err error) bool {
	var timeout net.Error
	return errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.As(err, &timeout) && timeout.Timeout()
}

// describe says why a request got no answer, briefly.
func (s *Sender) describe(ctx context.Context, err error) string {
	var refused *RefusedError
	switch {
	case errors.As(err, &refused):
		return "refused: the receiver's address is " + refused.Error()
	case timedOut(ctx, err):
		return fmt.Sprintf("no answer within %s (WEBHOOK_TIMEOUT)", s.timeout)
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return lookupFailed(dns)
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	return withoutSource(err)
}

// withoutSource is err's text without the local end of its connection:
// net.OpError's text names it ("read tcp 10.1.2.3:54622->203.0.113.9:443:
// read: connection reset by peer"), the address of Hearth's worker in its
// own network, which the delivery log, which the merchant reads, never
// shows (as RefusedError does not). The receiver's address stays.
func withoutSource(err error) string {
	msg := err.Error()
	var op *net.OpError
	if errors.As(err, &op) && op.Source != nil {
		src := op.Source.String()
		msg = strings.ReplaceAll(msg, src+"->", "")
		msg = strings.ReplaceAll(msg, src, "the local address")
	}
	return msg
}

// lookupFailed says why a receiver's name did not resolve, naming the
// name only: net.DNSError's text names the name server asked ("lookup
// NAME on 10.0.0.2:53: ..."), and, when it did not answer, the sockets of
// the lookup (its Err quotes the read's net.OpError), addresses of
// Hearth's own network that the delivery log, which the merchant reads,
// never shows (as RefusedError does not).
func lookupFailed(e *net.DNSError) string {
	why := "the name server failed"
	switch {
	case e.IsNotFound:
		why = "no such host"
	case e.IsTimeout:
		why = "the name server did not answer in time"
	}
	return "lookup " + e.Name + ": " + why
}
