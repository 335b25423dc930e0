-- The fencing check as one function, so that a projection transaction can
-- run it in the same round trip as its BEGIN (see readmodel.WithFence and
-- leader/doc.go). It reads the lock's term row FOR SHARE and fails, with
-- SQLSTATE HT001, unless the term is the caller's; then it sets, for this
-- transaction only, the idle timeout (the leader's lease) and hearth.term,
-- which change_log.term defaults to.
CREATE FUNCTION hearth_fence(lock_name text, leader_term bigint, lease_ms bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    current_term bigint;
BEGIN
    SELECT term INTO current_term FROM projection_leader WHERE name = lock_name FOR SHARE;
    IF current_term IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HT001', MESSAGE = format('no term begun for %s', lock_name);
    END IF;
    IF current_term <> leader_term THEN
        RAISE EXCEPTION USING ERRCODE = 'HT001',
            MESSAGE = format('this leader''s term is %s, the current term is %s', leader_term, current_term);
    END IF;
    PERFORM set_config('idle_in_transaction_session_timeout', lease_ms::text, true),
            set_config('hearth.term', leader_term::text, true);
END $$;
