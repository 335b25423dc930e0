package vault

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/order"
	"hearth/internal/aggregates"
	"hearth/internal/keyring"
)

// scanBox reads a box exactly as encoding/json does, or leaves it to
// encoding/json: never a different box, never one encoding/json rejects.
func FuzzScanBoxAgreesWithEncodingJSON(f *testing.F) {
	for _, seed := range []string{
		`{"subject":"5d2c1b8e-7d6f-4a3b-8c9d-0e1f2a3b4c5d","fields":["notes"],"box":"AAECAwQ="}`,
		`{"box": "AAECAwQ=", "fields": ["notes", "content"], "subject": "s"}`,
		`{"subject":"s","fields":[],"box":""}`,
		`{"subject":"s","fields":["a"],"box":"AAECAwQ","x":1}`,
		`{"subject":"s","subject":"t","fields":["a"],"box":"AA=="}`,
		`{"subject":"s\u0041","fields":["a"],"box":"AA=="}`,
		`{"subject":"s","fields":["a",],"box":"AA=="}`,
		`{"subject":"s","fields":["a"],"box":"AA=="}x`,
		`{"subject":"s","fields":["a"],"box":null}`,
		` { "subject" : "s" , "fields" : [ "a" , "b" ] , "box" : "AA==" } `,
		`{"subject":"Zoë","fields":["a"],"box":"AA=="}`,
		`{}`, `[]`, `"x"`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, obj []byte) {
		fast, ok := scanBox(obj)
		if !ok {
			return
		}
		var slow Box
		require.NoError(t, json.Unmarshal(obj, &slow), "scanBox read %q, which encoding/json rejects", obj)
		require.Equal(t, slow.Subject, fast.Subject, "%q", obj)
		require.Equal(t, len(slow.Fields), fast.names(), "%q", obj)
		require.Equal(t, slow.Fields, fieldsOf(t, fast), "%q", obj)
		require.Equal(t, len(slow.Box), len(fast.Box), "%q", obj)
		if len(slow.Box) > 0 {
			require.Equal(t, slow.Box, fast.Box, "%q", obj)
		}
	})
}

// fieldsOf returns the names of b's fields, however it was parsed.
func fieldsOf(t testing.TB, b *Box) []string {
	if b.fields == nil {
		return b.Fields
	}
	var names []string
	require.NoError(t, json.Unmarshal(b.fields, &names))
	return names
}

// The form SealWith writes, with jsonb's spacing too, takes the fast path.
func TestScanBoxReadsWhatSealWithWrites(t *testing.T) {
	for _, obj := range []string{
		`{"subject":"5d2c1b8e-7d6f-4a3b-8c9d-0e1f2a3b4c5d","fields":["notes","content"],"box":"AAECAwQ="}`,
		`{"box": "AAECAwQ=", "fields": ["notes", "content"], "subject": "5d2c1b8e-7d6f-4a3b-8c9d-0e1f2a3b4c5d"}`,
	} {
		b, ok := scanBox([]byte(obj))
		require.True(t, ok, obj)
		require.Equal(t, "5d2c1b8e-7d6f-4a3b-8c9d-0e1f2a3b4c5d", b.Subject)
		require.Equal(t, []string{"notes", "content"}, fieldsOf(t, b))
		erased, err := b.erasure()
		require.NoError(t, err)
		require.JSONEq(t, `{"erased":["notes","content"]}`, string(erased))
		require.Equal(t, []byte{0, 1, 2, 3, 4}, b.Box)
	}
}

// spliced puts the opened members where the sealed one was.
func TestSplicedReplacesTheSealedMember(t *testing.T) {
	data := []byte(`{"order_id":"o","sealed":{"subject":"s","fields":["notes"],"box":"AA=="},"amount_cents":1}`)
	at, _, end, ok := sealedIn(data)
	require.True(t, ok)
	got, ok := spliced(data, at, end, []byte(` {"notes":"hi","reason":"x"} `))
	require.True(t, ok)
	require.JSONEq(t, `{"order_id":"o","notes":"hi","reason":"x","amount_cents":1}`, string(got))
	_, ok = spliced(data, at, end, []byte(`{ }`))
	require.False(t, ok, "an empty object leaves a dangling comma: the caller decodes it apart")
}

// The cost of decoding one sealed event (finding and opening its box,
// then the typed decode) beside the same event in clear: what a catch-up
// pays per event for sealing.
func BenchmarkDecode(b *testing.B) {
	ring, err := keyring.Parse("k:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
	require.NoError(b, err)
	at := time.Now() // a clock that stands still: the key stays cached
	v := &Vault{ring: ring, now: func() time.Time { return at }, cache: map[string]entry{}}
	subject := "5d2c1b8e-7d6f-4a3b-8c9d-0e1f2a3b4c5d"
	key, err := v.NewKey(subject)
	require.NoError(b, err)
	require.NoError(b, v.Adopt(subject, key))
	clear, err := json.Marshal(order.Created{OrderID: "0b9e7f64-5f3c-4d1a-9a49-3c1d6f1e2a10", CustomerID: subject,
		AmountCents: 1200, Notes: "call Mrs Patel on 07700 900123 before 9, key under the mat", Status: order.StatusPending})
	require.NoError(b, err)
	sealed, err := v.Seal(subject, "OrderCreated", clear, order.Personal["OrderCreated"])
	require.NoError(b, err)
	decode := v.Decoder(aggregates.Order.Facts)
	for _, c := range []struct {
		name string
		data []byte
	}{{"clear", clear}, {"sealed", sealed}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := decode("OrderCreated", c.data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A writer uses a cached key for at most CacheFor after it opened it, then
// reads it again (KeySQL, which refuses a subject erased meanwhile): the
// erasure's last pass, CacheFor after it deleted the key, must find every
// event another instance sealed with its copy.
func TestCachedKeysAreFreshForWriters(t *testing.T) {
	ring, err := keyring.Parse("k:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
	require.NoError(t, err)
	at := time.Now()
	v := &Vault{ring: ring, now: func() time.Time { return at }, cache: map[string]entry{}}
	subject := "5d2c1b8e-7d6f-4a3b-8c9d-0e1f2a3b4c5d"
	require.False(t, v.Cached(subject), "never opened")
	key, err := v.NewKey(subject)
	require.NoError(t, err)
	require.NoError(t, v.Adopt(subject, key))
	require.True(t, v.Cached(subject))
	at = at.Add(CacheFor - time.Millisecond)
	require.True(t, v.Cached(subject))
	at = at.Add(time.Millisecond)
	require.False(t, v.Cached(subject), "opened CacheFor ago: the writer reads it again")
	require.NoError(t, v.Adopt(subject, key))
	require.True(t, v.Cached(subject), "read again: fresh")
	v.put(subject, entry{erased: true})
	require.False(t, v.Cached(subject), "erased")
}
