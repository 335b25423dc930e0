-- The read side: one row per aggregate with the stream version it reflects,
-- and one change-log row per applied event.

CREATE TABLE orders (
    id                  uuid PRIMARY KEY,
    merchant_id         uuid NOT NULL,
    request_id          uuid,
    customer_id         uuid NOT NULL,
    amount_cents        bigint NOT NULL,
    status              text NOT NULL,
    scheduled_start_at  timestamptz,
    scheduled_end_at    timestamptz,
    staff_id            uuid,
    dispatch_note       text NOT NULL DEFAULT '',
    cancellation_reason text NOT NULL DEFAULT '',
    completed_at        timestamptz,
    settlement_status   text NOT NULL,
    paid_amount_cents   bigint NOT NULL DEFAULT 0,
    payment_method      text NOT NULL DEFAULT '',
    paid_at             timestamptz,
    settlement_note     text NOT NULL DEFAULT '',
    notes               text NOT NULL DEFAULT '',
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    version             integer NOT NULL CHECK (version > 0)
);
CREATE INDEX orders_merchant_created ON orders (merchant_id, created_at DESC, id DESC);
CREATE INDEX orders_merchant_status ON orders (merchant_id, status, created_at DESC, id DESC);
CREATE INDEX orders_merchant_customer ON orders (merchant_id, customer_id, created_at DESC, id DESC);
CREATE INDEX orders_merchant_staff ON orders (merchant_id, staff_id, created_at DESC, id DESC);
CREATE INDEX orders_merchant_scheduled ON orders (merchant_id, scheduled_start_at, id);

CREATE TABLE change_log (
    id             bigserial PRIMARY KEY,
    merchant_id    uuid NOT NULL,
    aggregate_type text NOT NULL,
    aggregate_id   uuid NOT NULL,
    event_id       uuid NOT NULL UNIQUE,
    version        integer NOT NULL,
    action         text NOT NULL,
    actor          text NOT NULL,
    before         jsonb,
    after          jsonb NOT NULL,
    occurred_at    timestamptz NOT NULL,
    CONSTRAINT change_log_aggregate_version UNIQUE (aggregate_type, aggregate_id, version)
);
