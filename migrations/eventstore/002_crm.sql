-- Catalog items, name search, and the write side's bookings: the table that
-- makes double booking impossible under any concurrency.

CREATE EXTENSION IF NOT EXISTS btree_gist;
CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE TABLE catalog_items (
    id               uuid PRIMARY KEY,
    merchant_id      uuid NOT NULL REFERENCES merchants (id),
    name             text NOT NULL CHECK (name <> ''),
    base_price_cents bigint NOT NULL CHECK (base_price_cents >= 0),
    active           boolean NOT NULL DEFAULT true,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX catalog_items_merchant_created ON catalog_items (merchant_id, created_at DESC, id DESC);

-- `q` searches names with ILIKE '%q%'; trigram indexes keep that an index scan.
CREATE INDEX customers_name_trgm ON customers USING gin (name gin_trgm_ops);
CREATE INDEX staff_name_trgm ON staff USING gin (name gin_trgm_ops);
CREATE INDEX catalog_items_name_trgm ON catalog_items USING gin (name gin_trgm_ops);

-- One row per schedule, written in the same transaction as the schedule's
-- events. A live booking holds its staff member's time: the exclusion
-- constraint refuses a second live booking of the same staff member whose
-- half-open period overlaps (touching is allowed), and the partial unique
-- index keeps one live schedule per order.
CREATE TABLE bookings (
    schedule_id uuid PRIMARY KEY,
    merchant_id uuid NOT NULL REFERENCES merchants (id),
    order_id    uuid NOT NULL,
    staff_id    uuid NOT NULL REFERENCES staff (id),
    period      tstzrange NOT NULL CHECK (NOT isempty(period)),
    live        boolean NOT NULL DEFAULT true,
    CONSTRAINT bookings_no_double_booking EXCLUDE USING gist (staff_id WITH =, period WITH &&) WHERE (live)
);
CREATE UNIQUE INDEX bookings_one_live_per_order ON bookings (order_id) WHERE live;

CREATE TABLE "watermill_service_requests" (
    "offset"       bigserial,
    "uuid"         varchar(36) NOT NULL,
    "created_at"   timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "payload"      json DEFAULT NULL,
    "metadata"     json DEFAULT NULL,
    "transaction_id" xid8 NOT NULL,
    PRIMARY KEY ("transaction_id", "offset")
);
CREATE TABLE "watermill_offsets_service_requests" (
    consumer_group varchar(255) NOT NULL,
    offset_acked   bigint,
    last_processed_transaction_id xid8 NOT NULL,
    PRIMARY KEY (consumer_group)
);
CREATE TABLE "watermill_schedules" (
    "offset"       bigserial,
    "uuid"         varchar(36) NOT NULL,
    "created_at"   timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "payload"      json DEFAULT NULL,
    "metadata"     json DEFAULT NULL,
    "transaction_id" xid8 NOT NULL,
    PRIMARY KEY ("transaction_id", "offset")
);
CREATE TABLE "watermill_offsets_schedules" (
    consumer_group varchar(255) NOT NULL,
    offset_acked   bigint,
    last_processed_transaction_id xid8 NOT NULL,
    PRIMARY KEY (consumer_group)
);
