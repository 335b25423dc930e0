-- Webhook signing secrets sealed at rest under the master key
-- (internal/keyring, MASTER_KEY): each secret column gets a sealed twin,
-- which is what Hearth now writes. The plain columns stay for the rows
-- written before, until a Hearth with a master key seals them at start-up
-- (or `app keyring rewrap` does); every row has its current secret in one
-- form or the other.
ALTER TABLE webhook_endpoints
    ALTER COLUMN secret DROP NOT NULL,
    ADD COLUMN secret_sealed bytea,
    ADD COLUMN previous_secret_sealed bytea,
    ADD COLUMN older_secret_sealed bytea,
    ADD CONSTRAINT webhook_endpoints_secret_kept CHECK (secret IS NOT NULL OR secret_sealed IS NOT NULL);

-- The rows still holding a secret in clear: what start-up seals.
CREATE INDEX webhook_endpoints_plain_secrets ON webhook_endpoints (id)
    WHERE secret IS NOT NULL OR previous_secret IS NOT NULL OR older_secret IS NOT NULL;
