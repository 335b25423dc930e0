-- Webhook hardening: the dispatcher's wake-up by notification finds only
-- the endpoints whose operator queued something, and a secret rotation
-- during an overlap keeps the secret before the previous one while it is
-- still inside its own overlap.

-- The pending deliveries an operator queued (a test ping, a redelivery):
-- what a notification on webhook_deliveries announces. The dispatcher walks
-- the distinct endpoints of this index, one probe each, for those never
-- tried (adapters/webhooks, queuedSQL), and wakes only those, however many
-- other rows are pending. The predicate names no column a claim changes
-- (attempts is checked on the row), so that the claim's update stays HOT.
CREATE INDEX webhook_deliveries_queued ON webhook_deliveries (endpoint_id)
    WHERE status = 'pending' AND (ping_payload IS NOT NULL OR redelivery_of IS NOT NULL);

-- A second previous secret: a rotation during an overlap moves the previous
-- secret here, with its own end, instead of dropping it. With the current
-- and the previous ones, at most three secrets sign at once
-- (webhook.MaxSecrets).
ALTER TABLE webhook_endpoints ADD COLUMN older_secret text, ADD COLUMN older_secret_until timestamptz;
