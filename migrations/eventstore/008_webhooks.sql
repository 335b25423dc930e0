-- Webhooks (issue 12): the endpoints operators register, and the outbox of
-- deliveries that the webhook leader fans events out into and delivers
-- from (adapters/webhooks). They live in the event-store database, with the
-- merchants, the events they refer to and the idempotency keys whose
-- answers are stored in the same transaction as an endpoint write.

-- The fencing term of a leader that writes to the event-store database.
-- Leadership terms begin in projection_leader (read-model database, package
-- leader); the webhook leader copies its term here before it writes
-- anything, with an update that only ever raises it, and every transaction
-- that records fan-out or delivery state checks it first through
-- hearth_es_fence. The argument of leader/doc.go applies row for row: the
-- update waits for the transactions of the earlier term that read the row
-- FOR SHARE, and those that come after it read the new term and fail.
CREATE TABLE event_store_terms (
    name text PRIMARY KEY,                  -- the lock name, e.g. hearth/webhooks
    term bigint NOT NULL CHECK (term > 0)
);

-- hearth_fence (readmodel/005) for the event-store database: the same
-- checks, the same SQLSTATE HT001, the same transaction-local idle timeout.
CREATE FUNCTION hearth_es_fence(lock_name text, leader_term bigint, lease_ms bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    current_term bigint;
BEGIN
    SELECT term INTO current_term FROM event_store_terms WHERE name = lock_name FOR SHARE;
    IF current_term IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HT001', MESSAGE = format('no term begun for %s in the event store', lock_name);
    END IF;
    IF current_term <> leader_term THEN
        RAISE EXCEPTION USING ERRCODE = 'HT001',
            MESSAGE = format('this leader''s term is %s, the current term is %s', leader_term, current_term);
    END IF;
    PERFORM set_config('idle_in_transaction_session_timeout', lease_ms::text, true);
END $$;

CREATE TABLE webhook_endpoints (
    id              uuid PRIMARY KEY,
    merchant_id     uuid NOT NULL REFERENCES merchants (id),
    url             text NOT NULL CHECK (url <> ''),
    event_types     text[] NOT NULL DEFAULT '{}',   -- empty: every type
    description     text NOT NULL DEFAULT '',
    enabled         boolean NOT NULL DEFAULT true,
    -- Why Hearth disabled the endpoint (its retries ran out, or its receiver
    -- answered 410); cleared when an operator enables it again.
    disabled_reason text NOT NULL DEFAULT '',
    disabled_at     timestamptz,
    -- The signing secret (whsec_...), kept as is: signing needs it. During
    -- a rotation's overlap the previous one signs too.
    secret                text NOT NULL,
    previous_secret       text,
    previous_secret_until timestamptz,
    version         integer NOT NULL DEFAULT 1 CHECK (version > 0),
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);
CREATE INDEX webhook_endpoints_merchant ON webhook_endpoints (merchant_id, created_at DESC, id DESC);

-- One row per event and endpoint (and per test ping or redelivery): the
-- outbox and the delivery log in one. The fan-out inserts pending rows; the
-- dispatcher delivers an aggregate's rows of an endpoint in version order,
-- the next only once the one before succeeded.
CREATE TABLE webhook_deliveries (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq               bigserial NOT NULL,          -- insertion order: the queue's and the log's
    endpoint_id       uuid NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    merchant_id       uuid NOT NULL,
    event_id          uuid NOT NULL,               -- the public event's id (webhook-id)
    event_type        text NOT NULL,               -- the public type, e.g. order.created
    aggregate_id      uuid NOT NULL,
    aggregate_version integer NOT NULL,
    -- A test ping's body. An event's body is built from the events row at
    -- each attempt (the same bytes every time).
    ping_payload      bytea,
    redelivery_of     uuid,
    status            text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts          integer NOT NULL DEFAULT 0,
    next_attempt_at   timestamptz NOT NULL DEFAULT now(),
    first_attempt_at  timestamptz,
    last_attempt_at   timestamptz,
    response_status   integer,
    latency_ms        double precision,
    error             text NOT NULL DEFAULT '',
    created_at        timestamptz NOT NULL DEFAULT now(),
    completed_at      timestamptz,
    CHECK ((status = 'pending') = (completed_at IS NULL))
);
-- A queue: every row is updated twice (claimed, then done) and pruned.
-- Room on each page lets the claim's update, which changes no indexed
-- column, stay on its page (a HOT update: no new index entries), and
-- vacuum runs at 2 % of dead rows instead of 20 %, so that the queue's
-- index scans do not wade through the entries of finished rows.
ALTER TABLE webhook_deliveries SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02);
-- A redelivered event of the fan-out is not fanned out twice.
CREATE UNIQUE INDEX webhook_deliveries_once ON webhook_deliveries (endpoint_id, event_id) WHERE redelivery_of IS NULL;
-- The queue: an endpoint's pending rows in insertion order, and per
-- aggregate in version order (is there one before this one?).
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (endpoint_id, seq) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_queue ON webhook_deliveries (endpoint_id, aggregate_id, aggregate_version, seq) WHERE status = 'pending';
-- The log, newest first.
CREATE INDEX webhook_deliveries_log ON webhook_deliveries (endpoint_id, seq DESC);
-- Pruning of finished rows.
CREATE INDEX webhook_deliveries_done ON webhook_deliveries (completed_at) WHERE status <> 'pending';
