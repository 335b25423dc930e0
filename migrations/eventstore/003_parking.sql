-- Parking (issue 6). When an event exhausts its retry budget, its aggregate
-- is parked for that projection: the event and every later event of the
-- same aggregate wait in parked_events, in version order, until an operator
-- replays them (or skips one). Each projection parks independently.

CREATE TABLE parked_aggregates (
    projection     text NOT NULL,
    stream_id      uuid NOT NULL,
    stream_type    text NOT NULL,
    merchant_id    uuid NOT NULL,
    reason         text NOT NULL,
    first_event_id uuid NOT NULL,
    first_version  integer NOT NULL,
    since          timestamptz NOT NULL DEFAULT now(),
    attempts       integer NOT NULL DEFAULT 1,
    last_attempt_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projection, stream_id)
);
CREATE INDEX parked_aggregates_since ON parked_aggregates (since);

-- The full envelope of every waiting event, as the subscriber delivered it.
CREATE TABLE parked_events (
    projection text NOT NULL,
    stream_id  uuid NOT NULL,
    version    integer NOT NULL,
    event_id   uuid NOT NULL,
    type       text NOT NULL,
    envelope   jsonb NOT NULL,
    parked_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projection, stream_id, version)
);

-- Events an operator chose to skip: who, why and when. The projection
-- records a skipped event as a version bump with change-log action
-- "skipped"; verification folds it the same way.
CREATE TABLE skipped_events (
    projection text NOT NULL,
    event_id   uuid NOT NULL,
    stream_id  uuid NOT NULL,
    version    integer NOT NULL,
    type       text NOT NULL,
    skipped_by text NOT NULL,
    reason     text NOT NULL CHECK (reason <> ''),
    skipped_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projection, event_id)
);
