-- A staff member's working hours carry a version, their entity tag: a PUT
-- with If-Match (or the console's weekly form) that read an older one is
-- refused instead of overwriting a change it never saw. Hours written
-- before are at version 1; a staff member without hours is at 0.
ALTER TABLE staff_hours ADD COLUMN version integer NOT NULL DEFAULT 1 CHECK (version > 0);
