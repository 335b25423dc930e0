-- The web console's sessions (ports/http/console), here rather than in each
-- process's memory, so that every API instance sees them (no sticky
-- sessions behind a load balancer) and a restart signs nobody out. They
-- live with the API keys they stand for: a session is checked against its
-- key (revoked, expired, inactive staff member) in the lookup itself.
--
-- Only the SHA-256 of the cookie's token is kept, and the key's id: never
-- the token nor the key's secret.
CREATE TABLE console_sessions (
    token_hash   bytea PRIMARY KEY CHECK (length(token_hash) = 32),
    key_id       uuid NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
    time_zone    text NOT NULL DEFAULT 'UTC', -- the browser's, at sign-in (IANA name)
    flash        text NOT NULL DEFAULT '',    -- the one-shot message of the next page, as the console encodes it
    created_at   timestamptz NOT NULL,
    -- Moved forward at most once a minute by the lookup, not on every
    -- request, so that a console page costs no write.
    last_seen_at timestamptz NOT NULL,
    ends_at      timestamptz NOT NULL,         -- created_at + the longest session
    expires_at   timestamptz NOT NULL,         -- least(last_seen_at + idle, ends_at)
    CHECK (expires_at <= ends_at)
);

-- A key's sessions, least recently used first: the per-key cap closes those.
CREATE INDEX console_sessions_key_seen ON console_sessions (key_id, last_seen_at);
-- Expired sessions, oldest first: pruned in bounded batches.
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);
