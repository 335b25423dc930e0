-- The keys whose stored answers an erasure deleted (adapters/pubsub,
-- queueForgetAnswers): such an answer named the erased subject, so it goes,
-- but its key was answered, and a retry with it must not run the write
-- again (a retried creation of a customer would make the erased person
-- anew). A retry with a key kept here is told that its answer is gone and
-- runs nothing, until the row is pruned with the answers: created_at is the
-- deleted record's, so it is kept IDEMPOTENCY_KEEP as the answer would
-- have been. The row holds ids and the client's key only: no fingerprint
-- (a hash of a body that held the person's data) and no answer; location
-- is the answer's Location header (a path with an id), if it had one.
CREATE TABLE idempotency_forgotten (
    merchant_id uuid NOT NULL REFERENCES merchants (id),
    scope       text NOT NULL,
    key         text NOT NULL CHECK (key <> ''),
    location    text,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (merchant_id, scope, key)
);
-- Pruning deletes the oldest rows first.
CREATE INDEX idempotency_forgotten_created ON idempotency_forgotten (created_at);

-- hearth_idempotency_complete, which also refuses (HI001) the answer of an
-- attempt whose key was forgotten meanwhile: a claim made while the
-- erasure held the key's record waits for it, then finds no record and
-- inserts its own, having looked for a forgotten key before the erasure
-- committed. Its write then rolls back, and the retry it makes is told the
-- answer is gone. A new name, so that the previous release's instances keep
-- the function they call as it was during a rolling upgrade.
CREATE FUNCTION hearth_idempotency_answer(m uuid, k text, t uuid, s integer, h jsonb, b bytea) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    held_scope text;
BEGIN
    UPDATE idempotency_keys
       SET status = s, header = h, body = b, completed_at = now()
     WHERE merchant_id = m AND key = k AND token = t AND status IS NULL
    RETURNING scope INTO held_scope;
    IF NOT FOUND OR EXISTS (SELECT 1 FROM idempotency_forgotten
                             WHERE merchant_id = m AND scope IN (held_scope, '') AND key = k) THEN
        RAISE EXCEPTION USING ERRCODE = 'HI001',
            MESSAGE = format('idempotency key %s is no longer held by this request', k);
    END IF;
END $$;
