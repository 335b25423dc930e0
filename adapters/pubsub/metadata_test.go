package pubsub_test

import (
	"context"
	"database/sql"
	"testing"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/internal/pgtest"
)

// KeysetSchema reads a topic's rows exactly as watermill-sql's schema
// does: real messages the store published, and rows whose metadata takes
// its fallback (escapes, spaces, null, SQL NULL, a number, which both
// reject).
func TestKeysetSchemaUnmarshalsMessagesAsWatermillSQL(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	for range 3 {
		f.CreateOrder(t)
	}
	for _, metadata := range []any{`{"a":"\u00e9\"<x>","b":"c"}`, ` { "a" : "b" , "a":"c"} `, `null`, nil, `{}`, `{"version":1}`} {
		_, err := f.ES.DB.Exec(`INSERT INTO watermill_orders (uuid, payload, metadata, transaction_id)
			VALUES (gen_random_uuid()::text, '{"x":1}', $1, pg_current_xact_id())`, metadata)
		require.NoError(t, err)
	}
	type result struct {
		row wsql.Row
		err error
	}
	read := func(schema wsql.SchemaAdapter) []result {
		rows, err := f.ES.DB.QueryContext(context.Background(),
			`SELECT "offset", transaction_id, uuid, payload, metadata FROM watermill_orders ORDER BY "offset"`)
		require.NoError(t, err)
		defer func(rows *sql.Rows) { require.NoError(t, rows.Close()) }(rows)
		var out []result
		for rows.Next() {
			r, err := schema.UnmarshalMessage(rows)
			out = append(out, result{r, err})
		}
		require.NoError(t, rows.Err())
		return out
	}
	want := read(pubsub.Schema)
	got := read(pubsub.KeysetSchema{DefaultPostgreSQLSchema: pubsub.Schema})
	require.Len(t, want, 3+6)
	require.Len(t, got, len(want))
	for i, w := range want {
		g := got[i]
		if w.err != nil {
			require.EqualError(t, g.err, w.err.Error(), "row %d", i)
			continue
		}
		require.NoError(t, g.err, "row %d", i)
		require.Equal(t, w.row.Offset, g.row.Offset)
		require.Equal(t, w.row.UUID, g.row.UUID)
		require.Equal(t, w.row.Payload, g.row.Payload)
		require.Equal(t, w.row.Metadata, g.row.Metadata)
		require.Equal(t, w.row.ExtraData, g.row.ExtraData)
		require.Equal(t, w.row.Msg.UUID, g.row.Msg.UUID)
		require.Equal(t, w.row.Msg.Payload, g.row.Msg.Payload)
		require.Equal(t, w.row.Msg.Metadata, g.row.Msg.Metadata, "row %d: %s", i, w.row.Metadata)
	}
	require.Error(t, want[len(want)-1].err, "a number in the metadata")
	require.Nil(t, want[len(want)-4].row.Msg.Metadata, "null metadata")
	require.Contains(t, want[0].row.Msg.Metadata, "merchant_id", "the store's metadata")
}
