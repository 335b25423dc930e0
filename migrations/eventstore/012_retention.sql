-- What retention (adapters/pubsub/retention.go) has deleted from each
-- Watermill topic table: the last message it deleted, in delivery order
-- (transaction_id, "offset"), written by the statement that deletes. A
-- consumer group whose position is before it has lost messages it never
-- consumed: the consumers check it after each page they read
-- (pubsub.CheckGap) and stop, naming the gap, rather than skip it.
CREATE TABLE topic_pruned (
    topic          text PRIMARY KEY,
    transaction_id xid8 NOT NULL,
    "offset"       bigint NOT NULL,
    pruned_at      timestamptz NOT NULL DEFAULT now()
);
