// Package webhook is what Hearth promises about webhooks, apart from how
// they are stored and sent: an endpoint's rules, its signing secrets and
// the signature of a delivery (the Standard Webhooks scheme), the retry
// schedule, and the target addresses a delivery must never reach.
//
// # Signature
//
// A delivery carries three headers, as the Standard Webhooks specification
// (www.standardwebhooks.com) names them:
//
//   - webhook-id: the event's id (the same on every attempt and
//     redelivery, so receivers deduplicate by it);
//   - webhook-timestamp: the attempt's time, in Unix seconds;
//   - webhook-signature: "v1,<base64 of HMAC-SHA256(key, id.timestamp.body)>",
//     where key is the base64-decoded part of the secret after "whsec_".
//     During a secret rotation's overlap there is one such value per
//     secret, separated by a space; a receiver accepts the delivery when any
//     of them verifies with a secret it holds.
//
// A receiver refuses a timestamp too far from its clock (the usual
// tolerance is five minutes): the timestamp is signed, so an old delivery
// cannot be replayed with a new one.
package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/text"
)

// Endpoint is a URL a merchant's events are delivered to.
type Endpoint struct {
	ID         string
	MerchantID string
	// URL receives the deliveries (http or https).
	URL string
	// EventTypes are the public event types delivered; empty: all.
	EventTypes  []string
	Description string
	// Enabled endpoints get deliveries. Hearth disables an endpoint whose
	// receiver answers 410, or one of whose deliveries runs out of retries
	// while no other delivery to it succeeds, and says why in
	// DisabledReason (cleared when an operator enables it again).
	Enabled        bool
	DisabledReason string
	DisabledAt     *time.Time
	// Secret signs every delivery; PreviousSecret signs too until
	// PreviousSecretUntil (a rotation's overlap), and OlderSecret, the one
	// before it, until OlderSecretUntil (a rotation during the overlap of
	// the one before: see Rotate).
	Secret              string
	PreviousSecret      string
	PreviousSecretUntil *time.Time
	OlderSecret         string
	OlderSecretUntil    *time.Time
	Version             int
	CreatedAt           time.Time
	UpdatedAt           time.Time
}

// Limits of an endpoint's fields, and of a merchant's endpoints.
const (
	MaxURLLength         = 2048
	MaxDescriptionLength = 500
	// MaxEndpoints is how many endpoints one merchant may have: every event
	// is fanned out to each of them, so the number bounds the work one
	// merchant's events cost.
	MaxEndpoints = 20
	// MaxQueued is how many test pings and redeliveries one endpoint may
	// have pending. They are queued by hand, one request each, in the
	// event-store database's webhook_deliveries that every merchant's
	// deliveries share, and against a receiver that never answers they do
	// not go away (a redelivery is retried for the schedule's whole span):
	// without a cap only the request rate limits would bound them. A few
	// hundred is well above a test's needs and a few pages of redeliveries
	// after an outage (the runbook's loop waits out the 429 and goes on).
	MaxQueued = 500
	// QueuedRetryAfter is the Retry-After of a refusal at MaxQueued: a
	// receiver that answers takes a round's pings and redeliveries within
	// seconds; one that does not, never, and the detail says so.
	QueuedRetryAfter = time.Minute
)

// LimitQueued names MaxQueued in a refusal (the 429's limit).
const LimitQueued = "webhook-queue"

// Rules an endpoint command may break.
const (
	RuleEndpointLimit    = "webhook_endpoint.limit"
	RuleEndpointDisabled = "webhook_endpoint.disabled"
)

// Normalize trims the fields and checks them; known lists the public event
// types EventTypes may name. The URL's target address is checked apart
// (Refused), since that depends on configuration and name resolution.
func (e *Endpoint) Normalize(known []string) error {
	var errs apperr.Fields
	e.URL = strings.TrimSpace(e.URL)
	if problem := URLProblem(e.URL); problem != "" {
		errs.Add("url", "%s", problem)
	}
	e.Description = strings.TrimSpace(e.Description)
	if n := len([]rune(e.Description)); n > MaxDescriptionLength {
		errs.Add("description", "must be at most %d characters, got %d", MaxDescriptionLength, n)
	} else {
		text.Line(&errs, "description", e.Description)
	}
	seen := map[string]bool{}
	types := make([]string, 0, len(e.EventTypes))
	for i, t := range e.EventTypes {
		switch {
		case !contains(known, t):
			errs.Add("event_types["+strconv.Itoa(i)+"]", "unknown event type %q; one of %s", t, strings.Join(known, ", "))
		case !seen[t]:
			seen[t] = true
			types = append(types, t)
		}
	}
	e.EventTypes = types
	return errs.Err()
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Origin is an endpoint URL's scheme, host and port ("https://host:8443"),
// what a customer's export shows of it: the rest (userinfo, path, query)
// is where receivers put their credentials, and the export is handed to
// the customer, who needs to know who got their data, not how to call it.
// A URL that does not parse (a saved one always does) shows as "".
func Origin(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return ""
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
}

// URLProblem says what is wrong with u as an endpoint's URL ("" when
// nothing): it must be an absolute http or https URL with a host, a port
// (when it names one) from 1 to 65535, without a fragment, at most
// MaxURLLength bytes.
func URLProblem(u string) string {
	if u == "" {
		return "is required"
	}
	if len(u) > MaxURLLength {
		return fmt.Sprintf("must be at most %d bytes", MaxURLLength)
	}
	if p := text.Problem(u, false); p != "" {
		return p
	}
	parsed, err := url.Parse(u)
	switch {
	case err != nil:
		return "must be a URL: " + err.Error()
	case parsed.Scheme != "http" && parsed.Scheme != "https":
		return "must be an http or https URL, such as https://example.com/hooks/hearth"
	case parsed.Hostname() == "":
		return "must name a host"
	case parsed.Fragment != "" || strings.Contains(u, "#"):
		return "must not have a fragment"
	}
	if port := parsed.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("must have a port from 1 to 65535, got %s", port)
		}
	}
	return ""
}

// Refused says why a delivery must not go to addr ("" when it may):
// loopback, private, link-local and other addresses that are not the public
// internet's. A receiver there would let an operator make Hearth send
// requests inside its own network. An IPv6 address is judged without its
// zone ("::%eth0" is the unspecified address, which connects to this host):
// netip's IsUnspecified compares the zone too, and Prefix.Contains matches
// no address that has one.
func Refused(addr netip.Addr) string {
	a := addr.Unmap().WithZone("")
	switch {
	case !a.IsValid():
		return "not an IP address"
	case a.IsLoopback():
		return "a loopback address"
	case a.IsPrivate() || siteLocal.Contains(a):
		return "a private address"
	case a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast():
		return "a link-local address"
	case a.IsUnspecified() || thisNetwork.Contains(a):
		return "an unspecified address"
	case a.IsMulticast() || a == broadcast:
		return "a multicast or broadcast address"
	case sharedSpace.Contains(a):
		return "a shared (carrier-grade NAT) address"
	case nat64.Contains(a) || nat64Local.Contains(a):
		// A NAT64 gateway turns these into the IPv4 address they embed
		// (64:ff9b::7f00:1 is 127.0.0.1), whatever that is: refused as
		// a whole rather than judged by the embedded address, since a
		// local-use prefix may map anywhere.
		return "a NAT64 address"
	case ipv4Compatible.Contains(a) || sixToFour.Contains(a) || teredo.Contains(a):
		// Transition forms that embed an IPv4 address (::127.0.0.1,
		// 2002:7f00:1::, Teredo's obfuscated one), which a relay or a
		// tunnel on the host's network may turn into that address:
		// refused as a whole, as NAT64 is.
		return "an IPv6 transition address embedding an IPv4 one"
	case reservedV4.Contains(a) || benchmarking.Contains(a) || protocolAssignments.Contains(a):
		return "a reserved address"
	}
	return ""
}

var (
	siteLocal   = netip.MustParsePrefix("fec0::/10")
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	sharedSpace = netip.MustParsePrefix("100.64.0.0/10")
	nat64       = netip.MustParsePrefix("64:ff9b::/96")   // RFC 6052, the well-known prefix
	nat64Local  = netip.MustParsePrefix("64:ff9b:1::/48") // RFC 8215, local use
	broadcast   = netip.MustParseAddr("255.255.255.255")

	ipv4Compatible      = netip.MustParsePrefix("::/96")         // RFC 4291, deprecated
	sixToFour           = netip.MustParsePrefix("2002::/16")     // RFC 3056
	teredo              = netip.MustParsePrefix("2001::/32")     // RFC 4380
	reservedV4          = netip.MustParsePrefix("240.0.0.0/4")   // RFC 1112, future use
	benchmarking        = netip.MustParsePrefix("198.18.0.0/15") // RFC 2544, often routed inside a network
	protocolAssignments = netip.MustParsePrefix("192.0.0.0/24")  // RFC 6890, IETF protocol assignments
)

// SecretPrefix starts every signing secret.
const SecretPrefix = "whsec_"

// secretBytes is the length of a secret's key: the specification asks for
// 24 to 64 bytes.
const secretBytes = 32

// NewSecret returns a new signing secret: "whsec_" and the base64 of 32
// random bytes.
func NewSecret() string {
	b := make([]byte, secretBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24: it crashes the program instead)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// key is the HMAC key of a secret.
func key(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("signing secret does not start with %s", SecretPrefix)
	}
	k, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("signing secret: %w", err)
	}
	return k, nil
}

// Signature is the webhook-signature header of a delivery: one
// "v1,<signature>" per secret, separated by spaces.
func Signature(secrets []string, id string, timestamp int64, body []byte) (string, error) {
	parts := make([]string, 0, len(secrets))
	for _, s := range secrets {
		k, err := key(s)
		if err != nil {
			return "", err
		}
		mac := hmac.New(sha256.New, k)
		mac.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "."))
		mac.Write(body)
		parts = append(parts, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(parts, " "), nil
}

// MaxSecrets is how many secrets at most sign a delivery at once: the
// current one and the previous ones still inside their overlaps. Each adds
// a signature to every delivery's header, and each is one more secret a
// leak can have exposed.
const MaxSecrets = 3

// retired is a previous secret and the end of its overlap.
type retired struct {
	secret string
	until  *time.Time
}

// retired are the previous secrets still inside their overlaps at now,
// newest first.
func (e Endpoint) retired(now time.Time) []retired {
	var out []retired
	for _, r := range []retired{{e.PreviousSecret, e.PreviousSecretUntil}, {e.OlderSecret, e.OlderSecretUntil}} {
		if r.secret != "" && r.until != nil && now.Before(*r.until) {
			out = append(out, r)
		}
	}
	return out
}

// Secrets are the secrets that sign a delivery at now: the current one,
// and the previous ones still inside their overlaps (at most MaxSecrets in
// all).
func (e Endpoint) Secrets(now time.Time) []string {
	out := []string{e.Secret}
	for _, r := range e.retired(now) {
		out = append(out, r.secret)
	}
	return out
}

// EarlierSecretsUntil is until when an earlier secret still signs at now:
// the latest end among the previous secrets still inside their overlaps
// (nil when only the current secret signs). It reads the overlaps' ends
// alone, which Rotate sets with their secrets and nothing else does, so an
// endpoint read without its secrets (the API's reads) says the same.
func (e Endpoint) EarlierSecretsUntil(now time.Time) *time.Time {
	var latest *time.Time
	for _, until := range []*time.Time{e.PreviousSecretUntil, e.OlderSecretUntil} {
		if until != nil && now.Before(*until) && (latest == nil || until.After(*latest)) {
			latest = until
		}
	}
	return latest
}

// Rotate makes secret the current secret at now. For overlap the one it
// replaces still signs, so that the receiver can switch without refusing
// any delivery; the previous secrets still inside their own overlaps keep
// signing until they end: a receiver that has not switched yet keeps
// verifying. A rotation with an overlap that would make more than
// MaxSecrets sign at once is refused. A rotation without one (0) ends every
// earlier secret at once, and is always possible: after a leak, nothing
// old may sign any more.
func (e *Endpoint) Rotate(secret string, now time.Time, overlap time.Duration) error {
	var kept []retired
	if overlap > 0 {
		kept = e.retired(now)
		if len(kept) >= MaxSecrets-1 {
			ends := *kept[0].until
			for _, r := range kept[1:] {
				ends = minTime(ends, *r.until)
			}
			return apperr.Invalid("overlap", "at most %d secrets sign at once, and %d earlier secrets still sign (the first until %s): rotate with overlap 0s, or after then",
				MaxSecrets, len(kept), ends.UTC().Format(time.RFC3339))
		}
		until := now.Add(overlap)
		kept = append([]retired{{e.Secret, &until}}, kept...)
	}
	kept = append(kept, retired{}, retired{})
	e.PreviousSecret, e.PreviousSecretUntil = kept[0].secret, kept[0].until
	e.OlderSecret, e.OlderSecretUntil = kept[1].secret, kept[1].until
	e.Secret = secret
	return nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// Schedule is when a failing delivery is tried again: after its n-th failed
// attempt it waits Initial * 2^(n-1), at most Max, spread by Jitter either
// way; it is not tried again once the next attempt would come more than For
// after its first.
type Schedule struct {
	Initial, Max, For time.Duration
}

// Jitter is how far a wait may stray from the exponential value, as a share
// of it: 0.5 spreads a wait w over [w/2, 3w/2], so that the deliveries a
// receiver's outage failed together do not all come back at once
// (cenkalti/backoff's default randomization).
const Jitter = 0.5

// Base is the wait after the n-th failed attempt (n >= 1), before jitter.
func (s Schedule) Base(n int) time.Duration {
	w := float64(s.Initial) * math.Pow(2, float64(max(n, 1)-1))
	return time.Duration(min(w, float64(s.Max)))
}

// Wait is the wait after the n-th failed attempt, with jitter: rnd is a
// random number in [0, 1).
func (s Schedule) Wait(n int, rnd float64) time.Duration {
	b := float64(s.Base(n))
	return time.Duration(b * (1 - Jitter + 2*Jitter*rnd))
}

// Next is when a delivery whose first attempt was at first, and whose n-th
// attempt failed at now, is tried again; ok is false when it is not: the
// next attempt would come more than For after the first.
func (s Schedule) Next(first, now time.Time, n int, rnd float64) (time.Time, bool) {
	next := now.Add(s.Wait(n, rnd))
	return next, next.Sub(first) <= s.For
}

// The states of a delivery.
const (
	// Pending: waiting for its first attempt, for the one before it of its
	// aggregate, or for its next retry.
	Pending = "pending"
	// Succeeded: the receiver answered 2xx.
	Succeeded = "succeeded"
	// Failed: given up (its retries ran out, its endpoint was disabled, or a
	// test ping failed); a redelivery may send it again.
	Failed = "failed"
)

// The error texts of the delivery log that Hearth writes itself: every
// other text is a receiver's answer or the transport's, which a customer's
// export must not quote, and which these never resemble.
const (
	// NotSent begins the error of a delivery never sent to its receiver: its
	// body could not be built, or its endpoint was disabled before its turn.
	NotSent = "not sent: "
	// ErasedError replaces an attempt's error once the customer of its
	// aggregate is erased: a receiver that refuses a body often quotes it.
	ErasedError = "(erased)"
)

// Delivery is one event (or test ping) on its way to one endpoint, and
// what happened to it: the delivery log.
type Delivery struct {
	ID               string
	EndpointID       string
	MerchantID       string
	EventID          string
	EventType        string
	AggregateID      string
	AggregateVersion int
	// Ping is a test delivery: tried once, never retried, never disables
	// its endpoint. Body is its body, stored with it (an event's is built
	// from the stored event at each attempt).
	Ping bool
	Body []byte
	// RedeliveryOf is the delivery this one sends again ("" for none).
	RedeliveryOf   string
	Status         string
	Attempts       int
	NextAttemptAt  *time.Time // pending deliveries only
	FirstAttemptAt *time.Time
	LastAttemptAt  *time.Time
	// ResponseStatus, Latency and Error are those of the last attempt.
	ResponseStatus int // 0: no answer (refused, timed out, ...)
	Latency        time.Duration
	Error          string
	CreatedAt      time.Time
	CompletedAt    *time.Time
}
