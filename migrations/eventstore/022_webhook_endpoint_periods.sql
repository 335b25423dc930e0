-- When each webhook endpoint was enabled. The fan-out queues an event for
-- an endpoint that was enabled when the event occurred, not when the
-- fan-out reaches it (a catch-up after a failover, a parked aggregate
-- replayed later): an event of a period the operator had the endpoint
-- disabled is never sent once it is enabled again, and an event of an
-- enabled period is queued (then failed, listed and redeliverable) even
-- when the endpoint was disabled since.
--
-- One row per enabled period, from the endpoint's created_at (or the
-- updated_at of the change that enabled it) until the updated_at of the
-- change that disabled it (NULL while enabled): the API's clock, as the
-- events' occurred_at, and the database's for a disabling by Hearth. A
-- trigger keeps the rows, whoever writes the endpoint.
CREATE TABLE webhook_endpoint_periods (
    endpoint_id   uuid NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    enabled_from  timestamptz NOT NULL,
    enabled_until timestamptz
);
CREATE INDEX webhook_endpoint_periods_endpoint ON webhook_endpoint_periods (endpoint_id, enabled_from);

-- The endpoints of before: enabled since they were created, or until they
-- were disabled (when Hearth did, else their last change).
INSERT INTO webhook_endpoint_periods (endpoint_id, enabled_from, enabled_until)
SELECT id, created_at, CASE WHEN enabled THEN NULL ELSE greatest(created_at, coalesce(disabled_at, updated_at)) END
FROM webhook_endpoints;

-- A change that does not set updated_at (a statement of an operator's own)
-- counts from the database's clock.
CREATE FUNCTION hearth_webhook_endpoint_period() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed_at timestamptz;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.enabled THEN
            INSERT INTO webhook_endpoint_periods (endpoint_id, enabled_from) VALUES (NEW.id, NEW.created_at);
        END IF;
        RETURN NULL;
    END IF;
    changed_at := CASE WHEN NEW.updated_at IS DISTINCT FROM OLD.updated_at THEN NEW.updated_at ELSE now() END;
    IF NEW.enabled AND NOT OLD.enabled THEN
        INSERT INTO webhook_endpoint_periods (endpoint_id, enabled_from) VALUES (NEW.id, changed_at);
    ELSIF OLD.enabled AND NOT NEW.enabled THEN
        UPDATE webhook_endpoint_periods SET enabled_until = greatest(enabled_from, changed_at)
        WHERE endpoint_id = NEW.id AND enabled_until IS NULL;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER webhook_endpoint_period AFTER INSERT OR UPDATE OF enabled ON webhook_endpoints
    FOR EACH ROW EXECUTE FUNCTION hearth_webhook_endpoint_period();
