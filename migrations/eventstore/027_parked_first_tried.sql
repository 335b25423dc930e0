-- Whether the first waiting event of a parked aggregate has been tried
-- (it failed: the park, or a replay that stopped at it) or not (it became
-- first when the event before it was skipped). A skip that names no event
-- skips only one that was tried, so two operators skipping the event that
-- failed skip it once, not it and the untried one behind it.
ALTER TABLE parked_aggregates ADD COLUMN first_tried boolean NOT NULL DEFAULT true;
