-- A merchant's name search (?q= on the lists of customers, staff and
-- catalog items: merchant_id = $1 AND name ILIKE '%q%') reads that
-- merchant's index entries only. The trigram indexes of 002 held every
-- merchant's names in one tree, so Postgres intersected the merchant's
-- records with every record whose name matched: a big merchant's tens of
-- thousands of matches were read by each small merchant's search, and one
-- tenant slowed every other's. These indexes lead with merchant_id (a uuid
-- in a GIN index: btree_gin, trusted like pg_trgm): a search starts from
-- the merchant's own entries and skips through the trigrams' to them. A
-- query too short for a trigram (1 or 2 letters) is answered from the
-- merchant's entries alone.
--
-- fastupdate = off: with it on, a GIN index keeps recent insertions in a
-- pending list (up to gin_pending_list_limit, 4 MB) that every search reads
-- whole, whichever merchant wrote them. Off, each write updates the index
-- in place, a little slower; reference data is written rarely.
--
-- IF NOT EXISTS: on large tables an operator builds them CONCURRENTLY first
-- (docs/operations.md, name search indexes).
CREATE EXTENSION IF NOT EXISTS btree_gin;

CREATE INDEX IF NOT EXISTS customers_merchant_name_trgm ON customers
    USING gin (merchant_id, name gin_trgm_ops) WITH (fastupdate = off);
CREATE INDEX IF NOT EXISTS staff_merchant_name_trgm ON staff
    USING gin (merchant_id, name gin_trgm_ops) WITH (fastupdate = off);
CREATE INDEX IF NOT EXISTS catalog_items_merchant_name_trgm ON catalog_items
    USING gin (merchant_id, name gin_trgm_ops) WITH (fastupdate = off);

-- Nothing else searches names, and the old indexes would still be chosen
-- by the planner now and then (and cost every write).
DROP INDEX IF EXISTS customers_name_trgm;
DROP INDEX IF EXISTS staff_name_trgm;
DROP INDEX IF EXISTS catalog_items_name_trgm;
