-- An export of one customer's data (GET /v1/customers/{id}/export, app
-- customers export) reads the webhook deliveries of the customer's
-- aggregates; without this index that is a scan of every delivery.
-- aggregate_id is never updated, so the index keeps the deliveries'
-- updates HOT.
CREATE INDEX webhook_deliveries_aggregate ON webhook_deliveries (aggregate_id);
