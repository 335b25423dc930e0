-- Personal data at rest (docs/personal-data.md): a data key per data
-- subject, sealed by the master key (adapters/vault, MASTER_KEY), which
-- seals the personal fields of the subject's events; erasure deletes the
-- key and records the subject here.
CREATE TABLE data_keys (
    subject_id   uuid PRIMARY KEY,
    merchant_id  uuid NOT NULL REFERENCES merchants (id),
    subject_type text NOT NULL CHECK (subject_type IN ('customer', 'staff_member')),
    sealed       bytea NOT NULL, -- keyring.Seal(key, subject_id): names its master key
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- Erased subjects: never deleted, so that an event sealed under an erased
-- subject reads as erased (and a missing key of a subject not listed here
-- is an error that parks the aggregate, never a silent empty field).
CREATE TABLE erased_subjects (
    subject_id   uuid PRIMARY KEY,
    merchant_id  uuid NOT NULL REFERENCES merchants (id),
    subject_type text NOT NULL CHECK (subject_type IN ('customer', 'staff_member')),
    erased_at    timestamptz NOT NULL DEFAULT now(),
    erased_by    text NOT NULL
);

-- The subject whose data key sealed an event's personal fields: what
-- erasure looks up to find the streams to mark. Null for events with no
-- personal field (and for events written before, until app protect).
ALTER TABLE events ADD COLUMN subject_id uuid;
CREATE INDEX events_subject ON events (subject_id, stream_id) WHERE subject_id IS NOT NULL;

-- An erased customer or staff member keeps its row (and id: references
-- stay valid) with every personal column emptied.
ALTER TABLE customers ADD COLUMN erased_at timestamptz,
    DROP CONSTRAINT customers_name_check,
    ADD CONSTRAINT customers_name_check CHECK (name <> '' OR erased_at IS NOT NULL);
ALTER TABLE staff ADD COLUMN erased_at timestamptz,
    DROP CONSTRAINT staff_name_check,
    ADD CONSTRAINT staff_name_check CHECK (name <> '' OR erased_at IS NOT NULL);

-- The public customer.erased and staff_member.erased events: one stream per
-- erased subject (stream type data_subject, its id the subject's), on a
-- topic of their own, which the webhook fan-out and the relay read like
-- the aggregates' (read models need nothing from it).
CREATE TABLE "watermill_data_subjects" (
    "offset"       bigserial,
    "uuid"         varchar(36) NOT NULL,
    "created_at"   timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "payload"      json DEFAULT NULL,
    "metadata"     json DEFAULT NULL,
    "transaction_id" xid8 NOT NULL,
    PRIMARY KEY ("transaction_id", "offset")
);
CREATE TABLE "watermill_offsets_data_subjects" (
    consumer_group varchar(255) NOT NULL,
    offset_acked   bigint,
    last_processed_transaction_id xid8 NOT NULL,
    PRIMARY KEY (consumer_group)
);
CREATE TRIGGER notify AFTER INSERT ON "watermill_data_subjects"
    FOR EACH STATEMENT EXECUTE FUNCTION hearth_notify_topic();
