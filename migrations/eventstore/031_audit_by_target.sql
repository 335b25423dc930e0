-- The audit log read by target or by action (GET /admin/audit?target=,
-- ?action=; app audit list --target, --action), newest first: an
-- auditor's question (who exported or erased this person, what did this
-- key do) reads that target's or that action's entries alone, however
-- far back, not the whole log. The log is never pruned, so it only grows.
--
-- IF NOT EXISTS: on a large log an operator builds them CONCURRENTLY first
-- (docs/operations.md, upgrades).
CREATE INDEX IF NOT EXISTS admin_audit_target ON admin_audit (target, at DESC, id DESC);
CREATE INDEX IF NOT EXISTS admin_audit_action ON admin_audit (action, at DESC, id DESC);
-- A staff member's erasure empties their worker keys' names in the log
-- (details->>'staff_id'), under the staff member's lock: by this index,
-- not a read of the whole log.
CREATE INDEX IF NOT EXISTS admin_audit_staff ON admin_audit ((details->>'staff_id'));
