package pubsub

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"hearth/domain/uuid"
	"hearth/internal/pgtest"
)

// An erasure deletes the merchant's stored answers that name the subject
// or one of its streams, inside the transaction that holds the subject's
// lock, under the request path's statement timeout. A merchant keeps
// IDEMPOTENCY_KEEP of answers (every write with an Idempotency-Key, and
// every console form): finding the few that name the subject must not
// read them all, and search each for every one of the subject's streams
// (a customer with hundreds of orders), or the erasure of a busy
// merchant's customer costs more the more the merchant writes, until it
// no longer fits in the timeout.
func TestAnErasureFindsTheAnswersNamingItsSubjectByIndex(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	merchant, subject := uuid.New(), uuid.New()
	_, err := db.DB.ExecContext(ctx, `INSERT INTO merchants (id, name) VALUES ($1, $2)`, merchant, "m-"+merchant)
	require.NoError(t, err)
	// A day of answers of other customers' orders, and three that name
	// the subject (its creation, an order of theirs, a console form).
	const answers = 20000
	_, err = db.DB.ExecContext(ctx, `INSERT INTO idempotency_keys (merchant_id, scope, key, fingerprint, token, locked_until, status, header, body, completed_at)
		SELECT $1, 'operator', 'k' || i, '\x00', gen_random_uuid(), now(), 201, '{}',
			convert_to(format('{"id":"%s","customer_id":"%s","status":"open","notes":"ring twice","version":1}', gen_random_uuid(), gen_random_uuid()), 'UTF8'),
			now()
		FROM generate_series(1, $2) AS i`, merchant, answers)
	require.NoError(t, err)
	streams := []string{subject}
	for range 200 {
		streams = append(streams, uuid.New())
	}
	for i, body := range []string{
		fmt.Sprintf(`{"id":%q,"name":"Ada"}`, subject),
		fmt.Sprintf(`{"id":%q,"customer_id":%q,"status":"open"}`, uuid.New(), subject),
		fmt.Sprintf(`{"page":"/console/orders/%s"}`, streams[150]),
	} {
		_, err = db.DB.ExecContext(ctx, `INSERT INTO idempotency_keys (merchant_id, scope, key, fingerprint, token, locked_until, status, header, body, completed_at)
			VALUES ($1, 'operator', $2, '\x00', gen_random_uuid(), now(), 201, '{}', convert_to($3, 'UTF8'), now())`,
			merchant, fmt.Sprintf("subject-%d", i), body)
		require.NoError(t, err)
	}
	_, err = db.DB.ExecContext(ctx, `ANALYZE idempotency_keys`)
	require.NoError(t, err)

	b := &pgx.Batch{}
	var n int
	queueForgetAnswers(b, merchant, streams, &n)
	require.Len(t, b.QueuedQueries, 1)
	q := b.QueuedQueries[0]

	tx, err := db.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	plan, raw := pgtest.ExplainAnalyzed(t, tx, q.SQL, q.Arguments...)
	var forgotten int
	require.NoError(t, tx.QueryRowContext(ctx, `SELECT count(*) FROM idempotency_forgotten WHERE merchant_id = $1`, merchant).Scan(&forgotten))
	require.Equal(t, 3, forgotten, "the answers naming the subject or one of its streams are forgotten, and no other")
	plan.Walk(func(p pgtest.PlanNode) {
		read := (p.ActualRows + p.RemovedByFilter) * max(p.ActualLoops, 1)
		require.Less(t, read, float64(answers/10),
			"the erasure reads every stored answer of the merchant (%s %s on %s) to find the three that name its subject:\n%s",
			p.NodeType, p.IndexName, p.RelationName, raw)
	})
}
