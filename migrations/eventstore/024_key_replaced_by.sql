-- The key a rotation made from a key kept working for a grace period: that
-- key may not be rotated again (its expires_at is then the grace's end, not
-- its own expiry, which the new key would copy); the newest key is.
ALTER TABLE api_keys ADD COLUMN replaced_by uuid;
