-- Read models of service requests and schedules.

CREATE TABLE service_requests (
    id                   uuid PRIMARY KEY,
    merchant_id          uuid NOT NULL,
    customer_id          uuid NOT NULL,
    catalog_item_id      uuid,
    content              text NOT NULL,
    appointment_start_at timestamptz,
    appointment_end_at   timestamptz,
    status               text NOT NULL,
    source               text NOT NULL,
    notes                text NOT NULL DEFAULT '',
    order_id             uuid,
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL,
    version              integer NOT NULL CHECK (version > 0)
);
CREATE INDEX service_requests_merchant_created ON service_requests (merchant_id, created_at DESC, id DESC);
CREATE INDEX service_requests_merchant_status ON service_requests (merchant_id, status, created_at DESC, id DESC);
CREATE INDEX service_requests_merchant_customer ON service_requests (merchant_id, customer_id, created_at DESC, id DESC);
CREATE INDEX service_requests_merchant_appointment ON service_requests (merchant_id, appointment_start_at, id);

CREATE TABLE schedules (
    id          uuid PRIMARY KEY,
    merchant_id uuid NOT NULL,
    order_id    uuid NOT NULL,
    staff_id    uuid NOT NULL,
    start_at    timestamptz NOT NULL,
    end_at      timestamptz NOT NULL,
    status      text NOT NULL,
    notes       text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    version     integer NOT NULL CHECK (version > 0)
);
CREATE INDEX schedules_merchant_created ON schedules (merchant_id, created_at DESC, id DESC);
CREATE INDEX schedules_merchant_start ON schedules (merchant_id, start_at, id);
CREATE INDEX schedules_merchant_staff_start ON schedules (merchant_id, staff_id, start_at, id);
CREATE INDEX schedules_merchant_status_start ON schedules (merchant_id, status, start_at, id);
CREATE INDEX schedules_merchant_order ON schedules (merchant_id, order_id);
