-- GET /v1/availability reads a merchant's live bookings overlapping the
-- asked period: without this index, a sequential scan of every merchant's
-- bookings (the exclusion constraint's index leads with staff_id).
CREATE INDEX bookings_merchant_period ON bookings USING gist (merchant_id, period) WHERE live;
