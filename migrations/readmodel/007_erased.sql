-- The personal fields of a row that read as erased (their data subject was
-- erased: docs/personal-data.md), by their API names; empty otherwise.
ALTER TABLE orders ADD COLUMN erased text[] NOT NULL DEFAULT '{}';
ALTER TABLE service_requests ADD COLUMN erased text[] NOT NULL DEFAULT '{}';
ALTER TABLE schedules ADD COLUMN erased text[] NOT NULL DEFAULT '{}';
