-- A visit the generator withdrew (the plan no longer had it: paused,
-- skipped, changed away) and that the plan has again (resumed, changed
-- back) gets a new order: a cancelled order is final. Its ids are derived
-- from the visit's key and its generation, the number of orders the visit
-- has had before, so a second attempt at the same generation still
-- conflicts instead of making a second order. withdrawn tells the
-- generator's cancellations from an order cancelled by hand, which is
-- never brought back. Rows cancelled before: withdrawn when the generator
-- cancelled their order.
ALTER TABLE plan_visits
    ADD COLUMN generation integer NOT NULL DEFAULT 0 CHECK (generation >= 0),
    ADD COLUMN withdrawn boolean NOT NULL DEFAULT false;
UPDATE plan_visits pv SET withdrawn = true
WHERE pv.cancelled AND EXISTS (
    SELECT 1 FROM events e
    WHERE e.stream_id = pv.order_id AND e.type = 'OrderCancelled' AND e.actor = 'system:plans');
