-- Key lifecycle (issue 11): keys get a name, an optional expiry and the time
-- of their last use; platform administration is its own principal; every
-- admin action is recorded.

ALTER TABLE api_keys
    ADD COLUMN name         text NOT NULL DEFAULT '',
    ADD COLUMN expires_at   timestamptz,
    -- Written in batches (refdata.Store.FlushUses), not on every request:
    -- it lags the last use by up to KEY_LAST_USED_FLUSH.
    ADD COLUMN last_used_at timestamptz,
    ALTER COLUMN merchant_id DROP NOT NULL;

-- Admin keys were created "for a merchant" but always acted on every
-- merchant; their merchant meant nothing. They become platform keys, with no
-- merchant, and keep working. Only admin keys are merchant-less.
UPDATE api_keys SET merchant_id = NULL WHERE role = 'admin';
ALTER TABLE api_keys ADD CONSTRAINT api_keys_admin_has_no_merchant
    CHECK ((role = 'admin') = (merchant_id IS NULL));

-- GET /admin/keys?merchant_id=..., newest first.
CREATE INDEX api_keys_merchant_created ON api_keys (merchant_id, created_at DESC, id DESC);

-- Who did which admin action to what, and when: key changes, parked
-- replays and skips, rebuilds. Written in the action's own transaction when
-- the action is one in this database (keys, parking), right after it
-- otherwise (rebuilds run against the read models).
CREATE TABLE admin_audit (
    id      bigserial PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT now(),
    actor   text NOT NULL CHECK (actor <> ''),  -- key:<admin key id>, or the CLI's --by / cli:$USER
    action  text NOT NULL CHECK (action <> ''), -- key.create, key.revoke, key.rotate, parked.replay, parked.skip, rebuild.start, rebuild.cancel
    target  text NOT NULL DEFAULT '',           -- a key id, projection/aggregate id, or projection
    details jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX admin_audit_newest ON admin_audit (at DESC, id DESC);
