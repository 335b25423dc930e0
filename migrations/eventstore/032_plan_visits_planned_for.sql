-- The plan's preferred staff member a visit's order was last planned for,
-- whether it got them or not. staff_id names them only while the order has
-- an assignee, so a visit left unassigned (its preferred staff member
-- booked, off or inactive) could not tell that the plan has since come to
-- prefer someone else, and was never offered to them. NULL on the rows
-- written before (and by an instance of the previous release during the
-- rollout): such an unassigned row is taken as planned for the plan's
-- current choice, as before.
ALTER TABLE plan_visits ADD COLUMN planned_for uuid;
