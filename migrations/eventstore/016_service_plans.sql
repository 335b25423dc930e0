-- Service plans (issue 24): their topic, the merchant's time zone, staff
-- members' working hours, and the visit generator's ledger.

CREATE TABLE "watermill_plans" (
    "offset"       bigserial,
    "uuid"         varchar(36) NOT NULL,
    "created_at"   timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "payload"      json DEFAULT NULL,
    "metadata"     json DEFAULT NULL,
    "transaction_id" xid8 NOT NULL,
    PRIMARY KEY ("transaction_id", "offset")
);
CREATE TABLE "watermill_offsets_plans" (
    consumer_group varchar(255) NOT NULL,
    offset_acked   bigint,
    last_processed_transaction_id xid8 NOT NULL,
    PRIMARY KEY (consumer_group)
);
CREATE TRIGGER notify AFTER INSERT ON "watermill_plans"
    FOR EACH STATEMENT EXECUTE FUNCTION hearth_notify_topic();

-- The merchant's IANA time zone: the clock of plans' windows and of staff
-- members' working hours. UTC until the merchant sets it.
ALTER TABLE merchants ADD COLUMN time_zone text NOT NULL DEFAULT 'UTC' CHECK (time_zone <> '');

-- A staff member's working hours (reference data, like the staff member):
-- the weekly pattern and the dated exceptions as domain/availability
-- writes them, and the catalog items the staff member does.
CREATE TABLE staff_hours (
    staff_id         uuid PRIMARY KEY REFERENCES staff (id),
    merchant_id      uuid NOT NULL REFERENCES merchants (id),
    week             jsonb NOT NULL,
    exceptions       jsonb NOT NULL DEFAULT '[]',
    catalog_item_ids uuid[] NOT NULL DEFAULT '{}',
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX staff_hours_merchant ON staff_hours (merchant_id);

-- The visit generator's ledger: one row per visit it turned into an order,
-- keyed by the visit's key (plan id and original local date). The order's
-- id is derived from the key too, so a second attempt at the same visit
-- (a retry, a second worker, a new leader after a crash) conflicts on the
-- order's stream instead of creating a second order. Written in the same
-- transaction as the order's events.
CREATE TABLE plan_visits (
    visit_key   text PRIMARY KEY,
    merchant_id uuid NOT NULL REFERENCES merchants (id),
    plan_id     uuid NOT NULL,
    order_id    uuid NOT NULL UNIQUE,
    start_at    timestamptz NOT NULL,
    end_at      timestamptz NOT NULL,
    staff_id    uuid,
    price_cents bigint NOT NULL,
    -- why the visit has no staff member though the plan prefers one
    unassigned_reason text NOT NULL DEFAULT '',
    -- cancelled: the plan no longer has the visit (skipped, paused, ended,
    -- changed); its order was cancelled
    cancelled   boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX plan_visits_plan_start ON plan_visits (plan_id, start_at);
