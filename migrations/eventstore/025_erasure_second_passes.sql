-- The second passes of erasures not run yet. An erasure's first pass records
-- its second, due once no instance can still seal with the erased data key
-- (vault.CacheFor after the first pass), in its own transaction; the second
-- pass deletes the row. A row left past its due time (the caller gave up
-- waiting, the process died) is run by the erasure worker (the leader of
-- hearth/erasures): until then the erasure is not complete.
CREATE TABLE erasure_second_passes (
    subject_id     uuid PRIMARY KEY,
    merchant_id    uuid NOT NULL REFERENCES merchants (id),
    subject_type   text NOT NULL CHECK (subject_type IN ('customer', 'staff_member')),
    requested_by   text NOT NULL,
    correlation_id text NOT NULL DEFAULT '',
    due_at         timestamptz NOT NULL
);

CREATE INDEX erasure_second_passes_due ON erasure_second_passes (due_at);
