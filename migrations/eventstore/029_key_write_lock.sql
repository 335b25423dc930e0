-- A write's check of its request's key (refdata.KeyCheckSQL, after
-- refdata.KeyLockSQL) and the key's revocation meet on one lock: a
-- transaction-scoped advisory lock keyed by the key's id, which writes share
-- and a revocation (or a rotation that revokes at once) takes alone, before
-- it updates the key. So a revocation waits for the key's writes that
-- passed their check, and a write that checks later waits for the
-- revocation and then finds the key revoked: no write of a key commits
-- after its revocation answered. Advisory rather
-- than a row lock: a row lock takes the transaction's id, which an event
-- store write must take only with its first write (pubsub.WithCommitCheck
-- says why), and a row shared by a key's concurrent writes would be a
-- multixact on every write.

-- hearth_key_lock is the lock's key.
CREATE FUNCTION hearth_key_lock(key_id uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT hashtextextended('hearth/key/' || key_id::text, 0) $$;
