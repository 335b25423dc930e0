-- A write's check of its request's key (refdata.KeyCheckSQL) and the key's
-- revocation meet on one lock: a transaction-scoped advisory lock keyed by
-- the key's id, which writes share and a revocation (or a rotation that
-- revokes at once) takes alone, before it updates the key. So a revocation
-- waits for the key's writes that passed their check, and a write that
-- checks later waits for the revocation and then finds the key revoked: no
-- write of a key commits after its revocation answered. Advisory rather
-- than a row lock: a row lock takes the transaction's id, which an event
-- store write must take only with its first write (pubsub.WithCommitCheck
-- says why), and a row shared by a key's concurrent writes would be a
-- multixact on every write.

-- hearth_key_lock is the lock's key.
CREATE FUNCTION hearth_key_lock(key_id uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT hashtextextended('hearth/key/' || key_id::text, 0) $$;

-- hearth_key_write takes the lock, shared, and then (a statement of its
-- own, so with a snapshot taken after any wait for a revocation) fails,
-- dividing by zero (SQLSTATE 22012), unless the key of hash wanted_hash is
-- the key wanted_id and still works: refdata's keyWorks, the condition
-- Authenticate looks keys up with.
CREATE FUNCTION hearth_key_write(wanted_hash bytea, wanted_id uuid) RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hearth_key_lock(wanted_id));
    RETURN (SELECT 1 / count(*) FROM api_keys k LEFT JOIN staff s ON s.id = k.staff_id
        WHERE k.key_hash = wanted_hash AND k.id = wanted_id
          AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now()) AND (k.staff_id IS NULL OR s.active));
END $$;

-- hearth_session_write is hearth_key_write for a console write, which holds
-- a session of the key rather than its secret (refdata.SessionCheckSQL):
-- the session of token hash wanted_token must be open at at, and its key,
-- wanted_key, still work. A revocation deletes the key's sessions too.
CREATE FUNCTION hearth_session_write(wanted_token bytea, wanted_key uuid, at timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hearth_key_lock(wanted_key));
    RETURN (SELECT 1 / count(*) FROM console_sessions cs
        JOIN api_keys k ON k.id = cs.key_id LEFT JOIN staff s ON s.id = k.staff_id
        WHERE cs.token_hash = wanted_token AND k.id = wanted_key AND cs.expires_at > at
          AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now()) AND (k.staff_id IS NULL OR s.active));
END $$;
