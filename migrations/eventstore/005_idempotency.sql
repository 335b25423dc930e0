-- Idempotency keys: a write sent with an Idempotency-Key header stores its
-- answer here, in the transaction that stores its events (or its reference
-- record), so that a retry with the same key is answered from this row and
-- never writes again. Keys are per merchant.
--
-- A row is claimed first (status NULL, a random token, a lease): the
-- request holding the token is the only one whose completion can commit
-- (hearth_idempotency_complete checks the token), so a request that takes
-- over an expired lease makes the old holder's transaction fail rather than
-- write twice.
CREATE TABLE idempotency_keys (
    merchant_id  uuid NOT NULL REFERENCES merchants (id),
    key          text NOT NULL CHECK (key <> ''),
    fingerprint  bytea NOT NULL,
    token        uuid NOT NULL,
    locked_until timestamptz NOT NULL,
    status       integer,
    header       jsonb,
    body         bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    PRIMARY KEY (merchant_id, key),
    CHECK ((status IS NULL) = (completed_at IS NULL))
);
-- Pruning deletes the oldest rows first.
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

-- Stores the answer of the request holding token, in the caller's
-- transaction; fails with SQLSTATE HI001 when another request has taken the
-- key over (or it is already answered), which rolls that transaction back.
CREATE FUNCTION hearth_idempotency_complete(m uuid, k text, t uuid, s integer, h jsonb, b bytea) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE idempotency_keys
       SET status = s, header = h, body = b, completed_at = now()
     WHERE merchant_id = m AND key = k AND token = t AND status IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HI001',
            MESSAGE = format('idempotency key %s is no longer held by this request', k);
    END IF;
END $$;
