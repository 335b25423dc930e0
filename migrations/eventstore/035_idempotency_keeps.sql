-- The IDEMPOTENCY_KEEP of the API instances (internal/idempotency,
-- Announce): each writes its own, with when it last did, at start-up and
-- before each pruning round, and prunes with the longest kept by an
-- instance seen within that long. Instances deployed from different
-- manifests may disagree on the setting, and each prunes the one table:
-- pruned with its own, the shortest would win, and a retry through an
-- instance that keeps keys longer would write again. A keep nobody
-- announced within its own length is deleted: every record kept for it
-- has gone by then.
CREATE TABLE idempotency_keeps (
    keep_ms bigint PRIMARY KEY CHECK (keep_ms > 0),
    seen_at timestamptz NOT NULL
);
