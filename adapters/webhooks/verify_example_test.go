package webhooks_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/webhooks"
	"hearth/app/publicevent"
	"hearth/domain/uuid"
	"hearth/domain/webhook"
	"hearth/internal/harness"
)

// The receiver's side, as docs/api.md ("Verifying a delivery") shows it,
// word for word: TestVerifyExampleIsTheDocumented holds the two together.

// verifyWebhook checks a delivery from Hearth: one of its signatures must be
// the HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>" keyed with the
// endpoint's secret, and its timestamp within five minutes of now.
func verifyWebhook(secret string, header http.Header, body []byte, now time.Time) error {
	id, ts := header.Get("webhook-id"), header.Get("webhook-timestamp")
	sent, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("webhook-timestamp is not a Unix time")
	}
	if age := now.Sub(time.Unix(sent, 0)); age > 5*time.Minute || age < -5*time.Minute {
		return errors.New("webhook-timestamp is too far from now: refused as a replay")
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return errors.New("the secret is not whsec_ and base64")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(header.Get("webhook-signature")) {
		version, b64, _ := strings.Cut(sig, ",")
		got, err := base64.StdEncoding.DecodeString(b64)
		if version == "v1" && err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no valid signature")
}

// captured is one delivery as a receiver got it.
type captured struct {
	header http.Header
	body   []byte
}

// deliver makes one real delivery of a ping, signed with secrets, by
// Hearth's sender, to a receiver that keeps it; the clock of the sender is
// now.
func deliver(now time.Time, secrets ...string) (captured, error) {
	got := make(chan captured, 1)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- captured{header: r.Header.Clone(), body: body}
	}))
	defer receiver.Close()
	sender, err := webhooks.NewSender(webhooks.SenderConfig{Timeout: 5 * time.Second, AllowPrivate: true, Now: func() time.Time { return now }})
	if err != nil {
		return captured{}, err
	}
	ping := publicevent.Ping(uuid.New(), uuid.New(), uuid.New(), now)
	body, err := publicevent.Marshal(ping)
	if err != nil {
		return captured{}, err
	}
	if out := sender.Send(context.Background(), receiver.URL, secrets, ping.ID, body); !out.OK() {
		return captured{}, errors.New(out.Err)
	}
	return <-got, nil
}

func mustDeliver(t *testing.T, now time.Time, secrets ...string) captured {
	t.Helper()
	d, err := deliver(now, secrets...)
	require.NoError(t, err)
	return d
}

// A receiver verifies a real delivery with the documented function.
func Example_verifyWebhook() {
	secret := webhook.NewSecret() // as POST /v1/webhook-endpoints answered it
	d, err := deliver(time.Now(), secret)
	if err != nil {
		fmt.Println("not delivered:", err)
		return
	}
	if err := verifyWebhook(secret, d.header, d.body, time.Now()); err != nil {
		fmt.Println("refused:", err)
		return
	}
	var e struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(d.body, &e)
	fmt.Println("verified", e.Type)
	// Output: verified webhook_endpoint.ping
}

// The documented function refuses a tampered body, another secret, an old
// or a future timestamp, and accepts either secret of a rotation's
// overlap.
func TestVerifyWebhookRefuses(t *testing.T) {
	t.Parallel()
	secret, other := webhook.NewSecret(), webhook.NewSecret()
	now := time.Now()
	d := mustDeliver(t, now, secret)
	require.NoError(t, verifyWebhook(secret, d.header, d.body, now))
	tampered := append([]byte{}, d.body...)
	tampered[len(tampered)-2] ^= 1
	require.ErrorContains(t, verifyWebhook(secret, d.header, tampered, now), "no valid signature")
	require.ErrorContains(t, verifyWebhook(other, d.header, d.body, now), "no valid signature")
	require.ErrorContains(t, verifyWebhook(secret, d.header, d.body, now.Add(6*time.Minute)), "replay")
	require.ErrorContains(t, verifyWebhook(secret, d.header, d.body, now.Add(-6*time.Minute)), "replay")
	// A delivery replayed with a new timestamp no longer matches its signature.
	replayed := d.header.Clone()
	replayed.Set("webhook-timestamp", strconv.FormatInt(now.Add(time.Minute).Unix(), 10))
	require.ErrorContains(t, verifyWebhook(secret, replayed, d.body, now), "no valid signature")

	both := mustDeliver(t, now, secret, other)
	require.NoError(t, verifyWebhook(secret, both.header, both.body, now))
	require.NoError(t, verifyWebhook(other, both.header, both.body, now))
}

// docsAPI is docs/api.md.
func docsAPI(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "api.md"))
	require.NoError(t, err)
	return string(doc)
}

// The Go example of docs/api.md is verifyWebhook, as it stands above.
func TestVerifyExampleIsTheDocumented(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("verify_example_test.go")
	require.NoError(t, err)
	fn := regexp.MustCompile(`(?s)// verifyWebhook checks.*?\n}\n`).Find(src)
	require.NotNil(t, fn)
	require.Contains(t, docsAPI(t), "```go\n"+string(fn)+"```", "docs/api.md shows verifyWebhook as it is tested")
}

// The shell example of docs/api.md verifies a real delivery, and refuses a
// tampered one.
func TestVerifyShellExample(t *testing.T) {
	t.Parallel()
	_, err := harness.Ensure(context.Background(), "openssl", "openssl")
	require.NoError(t, err, "the example needs openssl")
	script := regexp.MustCompile("(?s)In a shell, with `openssl`.*?```sh\n(.*?)```").FindStringSubmatch(docsAPI(t))
	require.NotNil(t, script, "docs/api.md has the shell example")
	secret := webhook.NewSecret()
	d := mustDeliver(t, time.Now(), secret, webhook.NewSecret())
	run := func(body []byte) string {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "body.json"), body, 0o600))
		cmd := exec.Command("bash", "-c", script[1])
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "WEBHOOK_SECRET="+secret, "id="+d.header.Get("webhook-id"),
			"ts="+d.header.Get("webhook-timestamp"), "sig="+d.header.Get("webhook-signature"))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.TrimSpace(string(out))
	}
	require.Equal(t, "valid", run(d.body))
	require.Equal(t, "invalid signature", run(append(d.body, ' ')))
}
