-- A write that seals personal data for a customer and the customer's
-- erasure meet on one lock: a transaction-scoped advisory lock keyed by the
-- customer's id, which writes share and the erasure takes alone, first. So
-- an erasure waits for the writes under way and then sees their events and
-- data keys, and a write that comes later waits for the erasure and then
-- finds the customer erased: no write commits text for a customer after
-- the erasure, whatever an instance's key cache holds. Advisory rather than
-- a row lock, so that the writes of one customer do not write to its row
-- to share it (a row lock shared by several is a multixact, on every
-- write).

-- hearth_subject_lock is the lock's key.
CREATE FUNCTION hearth_subject_lock(subject uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT hashtextextended('hearth/subject/' || subject::text, 0) $$;

-- hearth_customer_write takes the lock, shared, and then (a statement of
-- its own, so with a snapshot taken after any wait for an erasure) returns
-- the merchant's customer's name, failing with SQLSTATE HT002 when the
-- merchant has no such customer and HT003 when the customer was erased.
CREATE FUNCTION hearth_customer_write(customer uuid, merchant uuid) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    customer_name text;
    erased boolean;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hearth_subject_lock(customer));
    SELECT name, erased_at IS NOT NULL INTO customer_name, erased FROM customers WHERE id = customer AND merchant_id = merchant;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HT002', MESSAGE = format('merchant %s has no customer %s', merchant, customer);
    END IF;
    IF erased OR EXISTS (SELECT 1 FROM erased_subjects WHERE subject_id = customer) THEN
        RAISE EXCEPTION USING ERRCODE = 'HT003', MESSAGE = format('customer %s was erased', customer);
    END IF;
    RETURN customer_name;
END $$;
