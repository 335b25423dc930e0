-- Leadership fencing (see leader/doc.go).
--
-- projection_leader holds one row per leadership lock: the fencing term,
-- incremented by every instance that takes the lock, before it starts its
-- projections. Every projection transaction reads its row FOR SHARE and
-- refuses to write unless the term is still its own; the FOR SHARE lock
-- also makes a new leader's increment wait until the old leader's
-- transactions in flight have ended.
CREATE TABLE projection_leader (
    name   text PRIMARY KEY,           -- the lock name, e.g. hearth/projections
    term   bigint NOT NULL CHECK (term > 0),
    holder text NOT NULL,              -- the instance that began the term (host/pid)
    since  timestamptz NOT NULL
);

-- The term each change-log row was written under. A projection transaction
-- sets hearth.term (transaction-local) when it checks its term, so every
-- projection records it without naming the column; rows written before
-- this migration, or outside a term, have none.
ALTER TABLE change_log
    ADD COLUMN term bigint DEFAULT nullif(current_setting('hearth.term', true), '')::bigint;
