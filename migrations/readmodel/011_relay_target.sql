-- Where each relay position was published: the JetStream stream and the
-- subjects' prefix (RELAY_STREAM, RELAY_SUBJECT_PREFIX) of the relay that
-- recorded it. Workers deployed from different manifests may disagree on
-- them, and leadership moves the relay between workers with this one
-- position: a worker whose target is another refuses to relay (rather than
-- put the events after the position into a stream the first one's
-- consumers never read). Rows of an earlier release have none: the next
-- relay to save the row records its own.
ALTER TABLE relay_offsets ADD COLUMN stream text, ADD COLUMN subject_prefix text;
