-- The read model of service plans (issue 24).

CREATE TABLE plans (
    id              uuid PRIMARY KEY,
    merchant_id     uuid NOT NULL,
    customer_id     uuid NOT NULL,
    catalog_item_id uuid NOT NULL,
    staff_id        uuid,
    time_zone       text NOT NULL,
    status          text NOT NULL,
    price_cents     bigint NOT NULL,
    terms           jsonb NOT NULL,
    changed_from    jsonb,
    skipped         jsonb NOT NULL DEFAULT '[]',
    moved           jsonb NOT NULL DEFAULT '[]',
    paused_at       timestamptz,
    ended_at        timestamptz,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    version         integer NOT NULL CHECK (version > 0)
);
CREATE INDEX plans_merchant_created ON plans (merchant_id, created_at DESC, id DESC);
CREATE INDEX plans_merchant_customer ON plans (merchant_id, customer_id, created_at DESC, id DESC);
CREATE INDEX plans_merchant_status ON plans (merchant_id, status, created_at DESC, id DESC);
