-- Events applied before their aggregate parked, delivered again after a
-- crash, were held as waiting (in front of the event that failed, which
-- then could not be skipped): Parking.hold no longer holds them, and those
-- held before are let go. Their apply changes nothing (version guard).
DELETE FROM parked_events e
USING parked_aggregates a
WHERE e.projection = a.projection AND e.stream_id = a.stream_id AND e.version < a.first_version;
