package pubsub

import (
	"encoding/json"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

// Metadata as watermill writes it (json.Marshal of the map), and as it
// could come back otherwise.
var metadataSeeds = []struct {
	json string
	fast bool // the fast path reads it
}{
	{`{"correlation_id":"c0ffee00-1111","merchant_id":"m1","stream_id":"s1","traceparent":"00-4bf9-00f0-01","type":"OrderCreated","version":"12"}`, true},
	{` { "a" : "b" ,` + "\n\t" + `"c":"", "é":"ü—" } `, true},
	{`{}`, true},
	{" {\n} ", true},
	{`{}x`, false},
	{`{"a":"1","a":"2"}`, true},
	{`{"a":"\u00e9"}`, false},
	{`{"a":"x\"y"}`, false},
	{`{"a\n":"x"}`, false},
	{"{\"a\":\"\xff\"}", false},
	{"{\"a\":\"\x01\"}", false},
	{`{"a":1}`, false},
	{`{"a":null}`, false},
	{`{"a":{"b":"c"}}`, false},
	{`null`, false},
	{`[]`, false},
	{`{"a":"b",}`, false},
	{`{"a":"b"}x`, false},
	{`{"a":"b"`, false},
	{`{"a" "b"}`, false},
	{``, false},
}

func TestParseMetadataReadsWhatJSONUnmarshalReads(t *testing.T) {
	for _, s := range metadataSeeds {
		m := message.Metadata{}
		require.Equal(t, s.fast, parseMetadata([]byte(s.json), m), s.json)
		requireSameMetadata(t, []byte(s.json))
	}
}

// requireSameMetadata checks that unmarshalMetadata fills a message's
// metadata as json.Unmarshal does, or fails with its error.
func requireSameMetadata(t *testing.T, b []byte) {
	t.Helper()
	want := message.NewMessage("u", nil).Metadata
	wantErr := json.Unmarshal(b, &want)
	got := message.NewMessage("u", nil).Metadata
	err := unmarshalMetadata(b, &got)
	if wantErr != nil {
		require.EqualError(t, err, wantErr.Error(), "%q", b)
		return
	}
	require.NoError(t, err, "%q", b)
	require.Equal(t, want, got, "%q", b)
	if fast := (message.Metadata{}); parseMetadata(b, fast) {
		require.Equal(t, want, fast, "%q", b)
	}
}

func FuzzParseMetadataMatchesJSONUnmarshal(f *testing.F) {
	for _, s := range metadataSeeds {
		f.Add([]byte(s.json))
	}
	f.Fuzz(func(t *testing.T, b []byte) { requireSameMetadata(t, b) })
}

// BenchmarkUnmarshalMetadata compares the fast path with json.Unmarshal
// on metadata as the store writes it.
func BenchmarkUnmarshalMetadata(b *testing.B) {
	raw := []byte(metadataSeeds[0].json)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m := message.NewMessage("u", nil).Metadata
			if err := unmarshalMetadata(raw, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m := message.NewMessage("u", nil).Metadata
			if err := json.Unmarshal(raw, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
