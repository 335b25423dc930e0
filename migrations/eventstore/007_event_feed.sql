-- The event feed (GET /v1/events, issue 12): a merchant's events in commit
-- order, read as watermill-sql v3 reads a topic. A page is
--   WHERE merchant_id = $1 AND (merchant_id, transaction_id, position) > ($1, $2, $3)
--     AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
--   ORDER BY merchant_id, transaction_id, position LIMIT $4
-- which this index answers in order, stopping after LIMIT entries. IF NOT
-- EXISTS: on a large table an operator builds it CONCURRENTLY first
-- (docs/operations.md, the event feed).
CREATE INDEX IF NOT EXISTS events_merchant_feed ON events (merchant_id, transaction_id, position);
