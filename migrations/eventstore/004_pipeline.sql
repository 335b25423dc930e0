-- The projection pipeline: wake-up on NOTIFY and read-your-writes.
--
-- A statement trigger on every topic table sends the table's name on
-- channel hearth_topics; Postgres delivers it when the publishing
-- transaction commits, and the LISTEN connection of the leader wakes that
-- topic's subscribers (adapters/pubsub/notify.go).
CREATE FUNCTION hearth_notify_topic() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hearth_topics', TG_TABLE_NAME);
    RETURN NULL;
END
$$;

CREATE TRIGGER notify AFTER INSERT ON "watermill_orders"
    FOR EACH STATEMENT EXECUTE FUNCTION hearth_notify_topic();
CREATE TRIGGER notify AFTER INSERT ON "watermill_service_requests"
    FOR EACH STATEMENT EXECUTE FUNCTION hearth_notify_topic();
CREATE TRIGGER notify AFTER INSERT ON "watermill_schedules"
    FOR EACH STATEMENT EXECUTE FUNCTION hearth_notify_topic();

-- The transaction that wrote each event. A write answers with the position
-- of its last event; "the read models have reached position P" means every
-- event of P's transaction is reflected in its read-model row
-- (adapters/readmodel/consistency.go). Events written before this migration
-- all get the migration's transaction id, which only makes a wait for them
-- cover more events.
ALTER TABLE events ADD COLUMN transaction_id xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX events_transaction ON events (transaction_id);
