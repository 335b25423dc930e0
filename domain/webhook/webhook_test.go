package webhook

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"hearth/domain/apperr"
)

// The signature is the Standard Webhooks one: the specification's own
// example verifies, byte for byte.
func TestSignatureIsStandardWebhooks(t *testing.T) {
	t.Parallel()
	sig, err := Signature([]string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	require.NoError(t, err)
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", sig)

	// Two secrets (a rotation's overlap): one value each, space-separated.
	other := NewSecret()
	both, err := Signature([]string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", other}, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	require.NoError(t, err)
	first, second, ok := strings.Cut(both, " ")
	require.True(t, ok)
	require.Equal(t, sig, first)
	require.True(t, strings.HasPrefix(second, "v1,"))
	require.NotEqual(t, first, second)

	_, err = Signature([]string{"not-a-secret"}, "id", 1, nil)
	require.ErrorContains(t, err, "whsec_")
}

func TestNewSecret(t *testing.T) {
	t.Parallel()
	a, b := NewSecret(), NewSecret()
	require.NotEqual(t, a, b)
	k, err := key(a)
	require.NoError(t, err)
	require.Len(t, k, 32)
}

func TestSecretsDuringOverlap(t *testing.T) {
	t.Parallel()
	now := time.Now()
	until := now.Add(time.Hour)
	e := Endpoint{Secret: "new", PreviousSecret: "old", PreviousSecretUntil: &until}
	require.Equal(t, []string{"new", "old"}, e.Secrets(now))
	require.Equal(t, []string{"new"}, e.Secrets(until))
	require.Equal(t, []string{"new"}, Endpoint{Secret: "new"}.Secrets(now))
}

// A rotation during an overlap keeps every secret still inside its overlap
// signing, until its own end; at most MaxSecrets sign at once, and a
// rotation without overlap is always possible.
func TestRotateKeepsSecretsInsideTheirOverlaps(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := Endpoint{Secret: "s1"}
	require.NoError(t, e.Rotate("s2", t0, 24*time.Hour))
	require.Equal(t, []string{"s2", "s1"}, e.Secrets(t0))
	// An hour later, during s1's overlap, another rotation: s1 keeps
	// signing until its own end, s2 for the new overlap.
	require.NoError(t, e.Rotate("s3", t0.Add(time.Hour), 2*time.Hour))
	require.Equal(t, []string{"s3", "s2", "s1"}, e.Secrets(t0.Add(time.Hour)))
	require.Equal(t, []string{"s3", "s1"}, e.Secrets(t0.Add(3*time.Hour)), "s2's overlap ended, s1's goes on")
	require.Equal(t, []string{"s3"}, e.Secrets(t0.Add(24*time.Hour)))

	// A third secret inside its overlap would make four: refused, naming
	// the overlap; without an overlap it goes through and ends every
	// earlier secret (after a leak, nothing old signs).
	err := e.Rotate("s4", t0.Add(90*time.Minute), time.Hour)
	var invalid *apperr.ValidationError
	require.ErrorAs(t, err, &invalid)
	require.Contains(t, err.Error(), "at most 3 secrets sign at once")
	require.Contains(t, err.Error(), "2026-01-01T03:00:00Z", "when the first of them ends")
	require.Equal(t, "s3", e.Secret, "a refused rotation changes nothing")
	require.NoError(t, e.Rotate("s4", t0.Add(90*time.Minute), 0))
	require.Equal(t, []string{"s4"}, e.Secrets(t0.Add(90*time.Minute)))
	require.Empty(t, e.PreviousSecret)
	require.Empty(t, e.OlderSecret)
	// Ended overlaps are forgotten by the next rotation.
	require.NoError(t, e.Rotate("s5", t0.Add(2*time.Hour), time.Hour))
	require.NoError(t, e.Rotate("s6", t0.Add(2*time.Hour+time.Minute), time.Hour))
	require.Equal(t, []string{"s6", "s5", "s4"}, e.Secrets(t0.Add(2*time.Hour+time.Minute)))
	require.NoError(t, e.Rotate("s7", t0.Add(25*time.Hour), time.Hour))
	require.Equal(t, []string{"s7", "s6"}, e.Secrets(t0.Add(25*time.Hour)))
	require.Empty(t, e.OlderSecret)
	require.LessOrEqual(t, len(e.Secrets(t0.Add(25*time.Hour))), MaxSecrets)
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	known := []string{"order.created", "order.cancelled"}
	e := Endpoint{URL: " https://example.com/hooks ", Description: " ours ", EventTypes: []string{"order.created", "order.created"}}
	require.NoError(t, e.Normalize(known))
	require.Equal(t, "https://example.com/hooks", e.URL)
	require.Equal(t, "ours", e.Description)
	require.Equal(t, []string{"order.created"}, e.EventTypes)

	bad := Endpoint{URL: "ftp://example.com", Description: "a\x01b", EventTypes: []string{"order.created", "order.teleported"}}
	err := bad.Normalize(known)
	var v *apperr.ValidationError
	require.ErrorAs(t, err, &v)
	fields := map[string]string{}
	for _, f := range v.Fields {
		fields[f.Field] = f.Message
	}
	require.Contains(t, fields["url"], "http or https")
	require.Contains(t, fields["description"], "control characters")
	require.Contains(t, fields["event_types[1]"], `unknown event type "order.teleported"`)
}

func TestURLProblem(t *testing.T) {
	t.Parallel()
	for u, want := range map[string]string{
		"https://example.com/x":             "",
		"http://203.0.113.7:8080/hook?x=1":  "",
		"":                                  "is required",
		"example.com/hook":                  "http or https",
		"https:///path":                     "must name a host",
		"https://example.com/x#frag":        "fragment",
		"https://example.com/" + long(2100): "at most 2048",
		"https://exa mple.com/":             "must be a URL",
		"javascript:alert(1)":               "http or https",
		"https://example.com/\x00":          "control characters",
		// A port no connection can use.
		"https://example.com:99999/hook":          "port from 1 to 65535, got 99999",
		"https://example.com:0/hook":              "port from 1 to 65535, got 0",
		"https://example.com:99999999999999/hook": "port from 1 to 65535",
		"https://example.com:65535/hook":          "",
		"https://example.com:1/hook":              "",
		"https://example.com:/hook":               "",
	} {
		got := URLProblem(u)
		if want == "" {
			require.Empty(t, got, u)
		} else {
			require.Contains(t, got, want, u)
		}
	}
}

func long(n int) string { return strings.Repeat("a", n) }

func TestRefused(t *testing.T) {
	t.Parallel()
	for addr, refused := range map[string]bool{
		"127.0.0.1": true, "::1": true, "10.1.2.3": true, "172.16.0.1": true, "192.168.1.1": true,
		"169.254.169.254": true, "fe80::1": true, "fc00::1": true, "0.0.0.0": true, "::": true,
		"100.64.0.1": true, "224.0.0.1": true, "255.255.255.255": true, "::ffff:127.0.0.1": true,
		"::ffff:10.0.0.1": true, "fec0::1": true,
		// NAT64: the well-known prefix (here 127.0.0.1 and 8.8.8.8
		// embedded) and the local-use one.
		"64:ff9b::7f00:1": true, "64:ff9b::808:808": true, "64:ff9b:1::a00:1": true, "64:ff9b:1:ffff::1": true,
		// Transition forms embedding an IPv4 address, and reserved IPv4.
		"::127.0.0.1": true, "::8.8.8.8": true, "2002:7f00:1::1": true, "2001:0:4136:e378:8000:63bf:3fff:fdd2": true,
		"240.0.0.1": true, "198.18.0.1": true, "198.19.255.255": true, "192.0.0.8": true,
		"2001:4860:4860::8888": false, "198.20.0.1": false,
		"64:ff9b:2::1":  false,
		"93.184.216.34": false, "2606:2800:220:1:248:1893:25c8:1946": false, "8.8.8.8": false,
	} {
		got := Refused(netip.MustParseAddr(addr))
		require.Equal(t, refused, got != "", "%s: %q", addr, got)
	}
}

// The schedule doubles from Initial up to Max, spreads each wait by Jitter
// and stops once the next attempt would come more than For after the
// first.
func TestSchedule(t *testing.T) {
	t.Parallel()
	s := Schedule{Initial: time.Second, Max: 10 * time.Second, For: time.Minute}
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second},
		[]time.Duration{s.Base(1), s.Base(2), s.Base(3), s.Base(4), s.Base(5), s.Base(40)})
	require.Equal(t, 2*time.Second, s.Wait(3, 0))
	require.Equal(t, 4*time.Second, s.Wait(3, 0.5))
	require.InDelta(t, float64(6*time.Second), float64(s.Wait(3, 0.999999)), float64(time.Millisecond))

	first := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	next, ok := s.Next(first, first.Add(50*time.Second), 7, 0.5)
	require.True(t, ok)
	require.Equal(t, first.Add(time.Minute), next, "exactly For after the first attempt: still tried")
	_, ok = s.Next(first, first.Add(50*time.Second+time.Millisecond), 7, 0.5)
	require.False(t, ok, "past For: given up")
}

// A zone does not change what an IPv6 address is: netip.Prefix.Contains
// matches no address that has one, so every prefix Refused checks must be
// checked without it ("[64:ff9b::a00:1%25eth0]" in a URL is 10.0.0.1
// through a NAT64 gateway all the same).
func TestRefusedWhateverTheZone(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"::1", "fe80::1", "fc00::1", "::", "::ffff:127.0.0.1", "fec0::1",
		"64:ff9b::7f00:1", "64:ff9b::a00:1", "64:ff9b:1::a00:1", "::127.0.0.1", "2002:7f00:1::1",
		"2001:0:4136:e378:8000:63bf:3fff:fdd2", "ff02::1"} {
		for _, zone := range []string{"eth0", "lo", "1"} {
			got := Refused(netip.MustParseAddr(addr + "%" + zone))
			assert.NotEmpty(t, got, "%s%%%s is not refused", addr, zone)
			assert.Equal(t, Refused(netip.MustParseAddr(addr)), got, "%s%%%s", addr, zone)
		}
	}
	require.Empty(t, Refused(netip.MustParseAddr("2001:4860:4860::8888%eth0")), "a public address with a zone is still public")
}
