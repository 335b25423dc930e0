package webhooks

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"hearth/domain/uuid"
	"hearth/domain/webhook"
	"hearth/internal/pgtest"
)

// Every send ends within the hold of the claim it was sent under, even when
// every one takes the whole timeout: a round claims claimBatch deliveries
// and sends inFlightPerEndpoint at a time, so its later sends would start
// several timeouts after the claim (then a leader slowed or paused in the
// middle of a round would send what the next leader claimed after the
// hold). Those are put back and claimed again by the next round. And a send
// that could no longer end within the hold does not start.
func TestRoundSendsEndWithinTheClaim(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	// The hold's margin is a few seconds: the timeout must be long enough
	// for a round's later waves to go past a hold of one timeout.
	const timeout = 2 * time.Second
	type arrival struct{ at, holdEnds time.Time }
	var mu sync.Mutex
	var arrivals []arrival
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // net/http notices a client gone only once the body is read
		a := arrival{at: time.Now()}
		// The hold of the claim this send is made under.
		if err := db.DB.QueryRow(`SELECT next_attempt_at FROM webhook_deliveries WHERE event_id = $1`,
			r.Header.Get("webhook-id")).Scan(&a.holdEnds); err != nil {
			t.Errorf("read the claim: %v", err)
		}
		mu.Lock()
		arrivals = append(arrivals, a)
		mu.Unlock()
		<-r.Context().Done() // no answer: every send takes the whole timeout
	}))
	defer receiver.Close()
	merchant, endpoint := anEndpoint(t, db, receiver.URL)
	// A round's worth of test pings, each of its own aggregate.
	_, err := db.DB.Exec(`INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version, ping_payload)
		SELECT $1, $2, gen_random_uuid(), 'webhook_endpoint.ping', gen_random_uuid(), 1, '{}' FROM generate_series(1, $3)`, endpoint, merchant, claimBatch)
	require.NoError(t, err)

	sender, err := NewSender(SenderConfig{Timeout: timeout, AllowPrivate: true})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := hourlyDispatcher(t, ctx, db, sender, endpoint)

	require.Eventually(t, func() bool {
		var failed, attempts int
		require.NoError(t, db.DB.QueryRow(`SELECT count(*), coalesce(sum(attempts), 0) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'failed'`,
			endpoint).Scan(&failed, &attempts))
		return failed == claimBatch && attempts == claimBatch
	}, 20*time.Second, 10*time.Millisecond, "every ping tried once (those put back uncounted), then recorded")
	mu.Lock()
	got := arrivals
	mu.Unlock()
	require.Len(t, got, claimBatch)
	for i, a := range got {
		require.True(t, a.at.Add(timeout).Before(a.holdEnds), "send %d may end at %s, after its claim's hold, %s", i, a.at.Add(timeout), a.holdEnds)
	}

	// A send that could not end within the hold does not start (the round
	// began a hold ago: the leader was paused since); its claim is put
	// back, untried.
	out := d.send(ctx, webhook.Endpoint{URL: receiver.URL, Secret: webhook.NewSecret()},
		[]claim{{id: uuid.New(), eventID: uuid.New(), body: []byte("{}")}}, time.Now().Add(-d.hold))
	require.Len(t, out, 1)
	require.True(t, out[0].release, "%+v", out[0])
	mu.Lock()
	require.Len(t, arrivals, claimBatch, "nothing sent")
	mu.Unlock()
	cancel()
	d.wg.Wait()
}

// selfSigned is a TLS certificate for dnsNames, signed by itself.
func selfSigned(t *testing.T, dnsNames ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "receiver"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: dnsNames,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// A transport's error is stored as storable text: a receiver whose TLS
// certificate names a host with a NUL in it (an IA5String may hold one, and
// the certificate need not be trusted: the name check comes first) gets an
// error quoting that name, which Postgres would refuse. Stored as it was,
// the round recording the attempt failed every time, and the endpoint's
// worker was stuck: nothing sent, recorded, retried, failed or disabled.
func TestTransportErrorWithANULIsRecorded(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	receiver := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	receiver.TLS = &tls.Config{Certificates: []tls.Certificate{selfSigned(t, "receiver\x00.example")}}
	receiver.StartTLS()
	defer receiver.Close()
	u, err := url.Parse(receiver.URL)
	require.NoError(t, err)
	target := "https://localhost:" + u.Port() + "/" // a name, so that the error lists the certificate's names

	// The transport's error carries the NUL (before Send makes it storable).
	sender, err := NewSender(SenderConfig{Timeout: 2 * time.Second, AllowPrivate: true})
	require.NoError(t, err)
	out := sender.send(t.Context(), target, []string{webhook.NewSecret()}, "evt", []byte("{}"))
	require.Contains(t, out.Err, "\x00", "precondition: the transport's error quotes the certificate's names")

	merchant, endpoint := anEndpoint(t, db, target)
	// A test ping: tried once, then failed.
	delivery := uuid.New()
	_, err = db.DB.Exec(`INSERT INTO webhook_deliveries (id, endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version, ping_payload)
		VALUES ($1, $2, $3, gen_random_uuid(), 'webhook_endpoint.ping', $2, 1, '{}')`, delivery, endpoint, merchant)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := hourlyDispatcher(t, ctx, db, sender, endpoint)

	status := func() (s string, attempts int, e string) {
		_ = db.DB.QueryRow(`SELECT status, attempts, error FROM webhook_deliveries WHERE id = $1`, delivery).Scan(&s, &attempts, &e)
		return s, attempts, e
	}
	// The round after the send records it; a failed round is tried again
	// after 1 s, then 2 s, ...: several tries fit in 10 s.
	ok := assert.Eventually(t, func() bool { s, _, _ := status(); return s == webhook.Failed }, 10*time.Second, 20*time.Millisecond)
	s, attempts, e := status()
	cancel()
	d.wg.Wait()
	require.True(t, ok, "the ping's only attempt is never recorded: status %s, attempts %d, error %q", s, attempts, e)
	require.Equal(t, 1, attempts)
	require.Contains(t, e, "x509: certificate is valid for receiver.example, not localhost")
}

// An endpoint is failing once, since its last success, an attempt got no
// HTTP answer or the receiver refused the events of two aggregates; pings,
// releases and bodies not built say nothing of it.
func TestHealthAfterARound(t *testing.T) {
	t.Parallel()
	refused := func(aggregate string) result {
		return result{aggregate: aggregate, status: webhook.Pending, code: http.StatusInternalServerError}
	}
	unanswered := result{aggregate: "c", status: webhook.Pending}
	ok := result{aggregate: "d", status: webhook.Succeeded, code: http.StatusOK}
	var h health
	h = h.after([]result{refused("a")})
	require.Equal(t, health{refused: "a"}, h, "one aggregate refused: not failing")
	h = h.after([]result{refused("a")})
	require.False(t, h.failing, "the same aggregate again")
	h = h.after([]result{{status: webhook.Failed, ping: true}, {release: true}, {aggregate: "b", status: webhook.Pending, notSent: true}})
	require.Equal(t, health{refused: "a"}, h, "pings, releases and bodies not built leave it")
	h = h.after([]result{refused("b")})
	require.True(t, h.failing, "a second aggregate refused")
	require.Equal(t, health{}, h.after([]result{refused("e"), ok}), "a success ends it")
	require.True(t, health{}.after([]result{unanswered}).failing, "no HTTP answer")
	require.True(t, health{}.after([]result{refused("a"), refused("b")}).failing, "two aggregates in one round")
}

// anEndpoint adds a merchant with one webhook endpoint at url.
func anEndpoint(t *testing.T, db *bun.DB, url string) (merchant, endpoint string) {
	t.Helper()
	merchant, endpoint = uuid.New(), uuid.New()
	_, err := db.DB.Exec(`INSERT INTO merchants (id, name) VALUES ($1, $2)`, merchant, "m-"+merchant)
	require.NoError(t, err)
	_, err = db.DB.Exec(`INSERT INTO webhook_endpoints (id, merchant_id, url, secret, created_at, updated_at)
		VALUES ($1, $2, $3, $4, now(), now())`, endpoint, merchant, url, webhook.NewSecret())
	require.NoError(t, err)
	return merchant, endpoint
}

// hourlyDispatcher starts a dispatcher whose retries wait an hour (a test
// sees one attempt of each delivery) and wakes endpoint's worker.
func hourlyDispatcher(t *testing.T, ctx context.Context, db *bun.DB, sender *Sender, endpoint string) *Dispatcher {
	t.Helper()
	d, err := NewDispatcher(ctx, DispatcherConfig{DB: db.DB, Sender: sender, Secrets: testKeys, Keep: time.Hour,
		Schedule: webhook.Schedule{Initial: time.Hour, Max: time.Hour, For: 24 * time.Hour},
		OnStale:  func(err error) { t.Errorf("stale term: %v", err) }})
	require.NoError(t, err)
	d.poke([]string{endpoint}, false)
	return d
}
