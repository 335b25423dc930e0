package pubsub

import (
	"cmp"
	"strconv"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
)

// KeysetSchema is watermill-sql's Postgres schema adapter with another
// shape of its select query, for Hearth's own subscribers and catch-up:
// the same messages in the same order, at a cost that does not grow with
// the backlog.
//
// watermill-sql (v3.1) selects the messages after the consumer group's
// position as "transaction_id = T AND offset > O, OR transaction_id > T",
// which Postgres answers with a bitmap scan of every message after the
// position and a sort of all of them for the first batch: every page costs
// the whole backlog behind it, so a catch-up costs the square of its
// backlog. The same condition written as a row comparison,
// (transaction_id, offset) > (T, O), is a range of the topic's primary key
// (transaction_id, offset), which an index scan walks in order and leaves
// after one batch. pg_snapshot_xmin bounds it as before, and the offsets
// adapter's query (Hearth's LockFreeOffsets, or the default one with its
// FOR UPDATE) is used unchanged.
type KeysetSchema struct {
	wsql.DefaultPostgreSQLSchema
	// Hidden has SelectQuery return, as a sixth column of every row,
	// whether the topic holds messages committed but hidden from this read
	// by pg_snapshot_xmin (an older transaction still open somewhere in
	// the cluster), and UnmarshalMessage put it in the row's ExtraData
	// under HiddenKey: a subscriber that read fewer messages than a batch
	// knows whether more are on their way.
	Hidden bool
}

// HiddenKey is the ExtraData entry of a row read with Hidden.
const HiddenKey = "hidden"

// BatchSize is the most messages SelectQuery returns.
func (s KeysetSchema) BatchSize() int { return cmp.Or(s.SubscribeBatchSize, 100) }

// SelectQuery selects the next batch after the group's position.
func (s KeysetSchema) SelectQuery(topic, group string, offsets wsql.OffsetsAdapter) wsql.Query {
	next := offsets.NextOffsetQuery(topic, group)
	hidden := ""
	if s.Hidden {
		// Committed rows at or past the snapshot's xmin are those the read
		// cannot see yet (uncommitted ones are not visible at all). Asked
		// as the newest visible row's transaction, which the primary key
		// answers from its end whatever the table's statistics say (an
		// EXISTS over the range may be planned as a scan of the table).
		hidden = `,
		  coalesce((SELECT max(transaction_id) FROM ` + s.MessagesTable(topic) + `) >= pg_snapshot_xmin(pg_current_snapshot()), false)`
	}
	return wsql.Query{
		Query: `WITH last_processed AS (` + next.Query + `)
		SELECT "offset", transaction_id, uuid, payload, metadata` + hidden + ` FROM ` + s.MessagesTable(topic) + `
		WHERE (transaction_id, "offset") > ((SELECT last_processed_transaction_id FROM last_processed),
		                                    (SELECT coalesce(offset_acked, 0) FROM last_processed))
		  AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
		ORDER BY transaction_id, "offset"
		LIMIT ` + strconv.Itoa(s.BatchSize()),
		Args: next.Args,
	}
}
