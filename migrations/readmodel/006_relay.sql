-- The relay's progress (adapters/pubsub/relay): per topic, the last message
-- relayed to NATS JetStream, in watermill-sql's order (transaction id, then
-- offset). It is written only in a transaction whose first statement is
-- hearth_fence('hearth/relay', term, ...), so an instance that no longer
-- leads the relay cannot move it; that is why it lives here, beside the
-- terms, and not in the event store's Watermill offsets tables.
CREATE TABLE relay_offsets (
    topic          text PRIMARY KEY,
    transaction_id bigint NOT NULL,
    "offset"       bigint NOT NULL,
    term           bigint NOT NULL,      -- the relay term that wrote it
    relayed_at     timestamptz NOT NULL  -- when that page was acknowledged by JetStream
);
