-- The latest rebuild of each projection (adapters/readmodel, Rebuild): its
-- progress, written when it starts (under its rebuild lock), at each change
-- of phase, every few seconds while it folds, and when it ends. It lets
-- GET /admin/rebuilds/{projection} answer on every instance, for a rebuild
-- run by another instance, by one that has restarted since, or by
-- `app rebuild`. A row in a running phase (fold, catch_up, swap) whose
-- rebuild lock no session holds is a rebuild whose process ended before it
-- finished. Instances of the previous release do not write it.
CREATE TABLE rebuilds (
    projection  text PRIMARY KEY,
    phase       text NOT NULL,
    events      bigint NOT NULL,
    total       bigint NOT NULL,
    "rows"      bigint NOT NULL,
    rate        double precision NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    error       text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
