-- The write side: tenants, keys, reference data, the event store and the
-- Watermill topic and offset tables (created here, never by
-- InitializeSchema, whose concurrent runs race).

CREATE TABLE merchants (
    id         uuid PRIMARY KEY,
    name       text NOT NULL UNIQUE CHECK (name <> ''),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE staff (
    id          uuid PRIMARY KEY,
    merchant_id uuid NOT NULL REFERENCES merchants (id),
    name        text NOT NULL CHECK (name <> ''),
    phone       text NOT NULL DEFAULT '',
    active      boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX staff_merchant_created ON staff (merchant_id, created_at DESC, id DESC);

-- Keys are stored as the SHA-256 of the secret; the secret is shown once.
CREATE TABLE api_keys (
    id          uuid PRIMARY KEY,
    merchant_id uuid NOT NULL REFERENCES merchants (id),
    role        text NOT NULL CHECK (role IN ('operator', 'worker', 'admin')),
    staff_id    uuid REFERENCES staff (id),
    key_hash    bytea NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz,
    CHECK ((role = 'worker') = (staff_id IS NOT NULL))
);

CREATE TABLE customers (
    id          uuid PRIMARY KEY,
    merchant_id uuid NOT NULL REFERENCES merchants (id),
    name        text NOT NULL CHECK (name <> ''),
    phone       text NOT NULL DEFAULT '',
    email       text NOT NULL DEFAULT '',
    address     text NOT NULL DEFAULT '',
    notes       text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX customers_merchant_created ON customers (merchant_id, created_at DESC, id DESC);

-- The event store. (stream_id, version) is unique: the loser of a race on a
-- stream gets a unique violation, never a silent overwrite.
CREATE TABLE events (
    position       bigserial PRIMARY KEY,
    event_id       uuid NOT NULL UNIQUE,
    stream_type    text NOT NULL,
    stream_id      uuid NOT NULL,
    version        integer NOT NULL CHECK (version > 0),
    merchant_id    uuid NOT NULL REFERENCES merchants (id),
    type           text NOT NULL,
    data           jsonb NOT NULL,
    occurred_at    timestamptz NOT NULL,
    correlation_id text NOT NULL,
    causation_id   text NOT NULL DEFAULT '',
    actor          text NOT NULL,
    CONSTRAINT events_stream_version UNIQUE (stream_id, version)
);
CREATE INDEX events_stream_type_position ON events (stream_type, position);

-- Watermill topics, exactly the shape watermill-sql v3's
-- DefaultPostgreSQLSchema and DefaultPostgreSQLOffsetsAdapter expect.
CREATE TABLE "watermill_orders" (
    "offset"       bigserial,
    "uuid"         varchar(36) NOT NULL,
    "created_at"   timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "payload"      json DEFAULT NULL,
    "metadata"     json DEFAULT NULL,
    "transaction_id" xid8 NOT NULL,
    PRIMARY KEY ("transaction_id", "offset")
);
CREATE TABLE "watermill_offsets_orders" (
    consumer_group varchar(255) NOT NULL,
    offset_acked   bigint,
    last_processed_transaction_id xid8 NOT NULL,
    PRIMARY KEY (consumer_group)
);

CREATE TABLE "watermill_poison" (
    "offset"       bigserial,
    "uuid"         varchar(36) NOT NULL,
    "created_at"   timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "payload"      json DEFAULT NULL,
    "metadata"     json DEFAULT NULL,
    "transaction_id" xid8 NOT NULL,
    PRIMARY KEY ("transaction_id", "offset")
);
CREATE TABLE "watermill_offsets_poison" (
    consumer_group varchar(255) NOT NULL,
    offset_acked   bigint,
    last_processed_transaction_id xid8 NOT NULL,
    PRIMARY KEY (consumer_group)
);
