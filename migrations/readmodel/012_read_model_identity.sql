-- The read model's identity: one row, made by the first instance that
-- starts on it (cmd/app, checkReadModelPaired), not here, so that copies
-- of a migrated template database do not share it. The event store records
-- which read model its instances use (eventstore/036, read_model_pairing),
-- and an instance whose READMODEL_DATABASE_URL names another refuses to
-- start. The row moves with the read models: a dump, a copy or a backup of
-- this database keeps it.
CREATE TABLE read_model_identity (
    one        boolean PRIMARY KEY DEFAULT true CHECK (one),
    id         uuid NOT NULL DEFAULT gen_random_uuid(),
    created_at timestamptz NOT NULL DEFAULT now()
);
