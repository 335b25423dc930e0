-- An endpoint's deletion no longer takes its delivery log with it in one
-- statement. The foreign key's ON DELETE CASCADE deleted every delivery of
-- the endpoint (WEBHOOK_DELIVERY_KEEP of them: millions for a busy
-- merchant) inside the DELETE request's transaction, under the request
-- path's statement timeout, locking each row and waiting for any row a
-- delivery round or an erasure held. Now the endpoint's row goes alone,
-- and the webhook leader's pruning deletes its deliveries a batch at a
-- time, as it deletes the finished ones older than WEBHOOK_DELIVERY_KEEP
-- (adapters/webhooks, Dispatcher.prune). Meanwhile nothing shows them:
-- every read of a delivery goes through its endpoint.

-- The endpoints deleted whose deliveries may still be in the log. A
-- trigger records them, whoever deletes the endpoint (the previous
-- release's instances during a rolling upgrade too). The row stays until
-- the endpoint has no delivery left and WEBHOOK_DELIVERY_KEEP has passed:
-- a fan-out that read the endpoint before its deletion committed may still
-- queue deliveries for it after the pruning's first pass, and those go at
-- its next pass.
CREATE TABLE webhook_endpoints_deleted (
    endpoint_id uuid PRIMARY KEY,
    deleted_at  timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION hearth_webhook_endpoint_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_endpoints_deleted (endpoint_id) VALUES (OLD.id) ON CONFLICT (endpoint_id) DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER webhook_endpoint_deleted AFTER DELETE ON webhook_endpoints
    FOR EACH ROW EXECUTE FUNCTION hearth_webhook_endpoint_deleted();

-- Dropping the key reads no row: a moment's lock on both tables.
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_endpoint_id_fkey;
