-- Which read model (read_model_identity.id, readmodel/012) this event
-- store's instances use, recorded by the first instance that starts.
-- Instances deployed from different manifests may disagree on
-- READMODEL_DATABASE_URL: one would project, from the consumer offsets
-- every worker shares here, into a database the others do not read, and
-- fence its projections with that database's terms. An instance whose read
-- model is another refuses to start (cmd/app, checkReadModelPaired).
CREATE TABLE read_model_pairing (
    one           boolean PRIMARY KEY DEFAULT true CHECK (one),
    read_model_id uuid NOT NULL,
    paired_at     timestamptz NOT NULL DEFAULT now()
);
