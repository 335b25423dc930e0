-- The API now refuses time zone names that are no IANA zone of their own
-- (civil.LoadZone): the machine's zone (Local, localtime, posixrules), the
-- second copies of every zone (posix/, right/: the latter counts leap
-- seconds, its clock some 27 s off), paths and other spellings of a name.
-- A merchant that saved one before would get 422 on availability and on
-- every new plan, which take the merchant's zone; plans already created
-- keep theirs (their events are read with time.LoadLocation).
--
-- Each such zone becomes the zone it names: a spelling its clean form
-- (as Go's path.Clean), a posix/ or right/ copy the zone itself. The
-- machine's zone cannot be known from here, and a path or ".." names no
-- zone: those become UTC, the column's default (docs/operations.md, upgrade
-- notes, tells operators to check them).
WITH cleaned AS (
    SELECT id, time_zone,
           regexp_replace(
               regexp_replace(
                   regexp_replace(regexp_replace(regexp_replace(time_zone, '/+', '/', 'g'), '(^|/)\./', '\1', 'g'), '(^|/)\./', '\1', 'g'),
                   '/$', ''),
               '^(posix|right)/', '') AS zone
    FROM merchants
), fixed AS (
    SELECT id, time_zone,
           CASE WHEN zone IN ('', 'Local', 'localtime', 'posixrules') OR zone LIKE '/%' OR zone LIKE '%..%'
                  OR zone LIKE 'posix/%' OR zone LIKE 'right/%'
                THEN 'UTC' ELSE zone END AS zone
    FROM cleaned
)
UPDATE merchants m SET time_zone = f.zone
FROM fixed f
WHERE m.id = f.id AND f.zone <> f.time_zone;
