-- Idempotency keys belong to the principal that sent them, not only to its
-- merchant: scope is the key's role, and a worker key's staff member
-- ("operator", "worker:<staff id>"), so that a key of another role or another
-- worker that reuses an Idempotency-Key runs its own request (and is refused
-- what it may not do) instead of being answered another principal's answer.
ALTER TABLE idempotency_keys ADD COLUMN scope text NOT NULL DEFAULT '';

-- Rows from before have scope '' (their principal was not kept): until they
-- are pruned (IDEMPOTENCY_KEEP), they answer a retry from any key of their
-- merchant, as they did, so that a retry across the upgrade never writes
-- twice; a new claim of the same key waits for or replays such a row.
--
-- Claims still open belong to attempts of the previous version: deleting
-- them makes those attempts' completion fail (hearth_idempotency_complete
-- finds no row), which rolls their writes back; the client's retry then
-- runs the write once. A stored 412 is dropped: a stale If-Match frees the
-- key now, as a stale expected_version (409) always did.
DELETE FROM idempotency_keys WHERE status IS NULL OR status = 412;

-- A stored answer must not keep a webhook endpoint's signing secret (it
-- would be replayed after a rotation): an answer that shows one is replaced
-- by the problem a replay of such an answer gets (ports/http, answer.go).
UPDATE idempotency_keys
   SET status = 409,
       header = jsonb_build_object('Content-Type', 'application/problem+json',
                                   'Location', '/v1/webhook-endpoints/' || (convert_from(body, 'UTF8')::jsonb ->> 'id')),
       body = convert_to(jsonb_build_object(
           'type', '/problems/secret-shown-once',
           'title', 'Conflict',
           'status', 409,
           'detail', 'this request was answered before, with the signing secret of /v1/webhook-endpoints/'
                     || (convert_from(body, 'UTF8')::jsonb ->> 'id')
                     || ', which is shown only once and not kept; to get a new secret, rotate it: POST /v1/webhook-endpoints/'
                     || (convert_from(body, 'UTF8')::jsonb ->> 'id') || '/rotate-secret'
       )::text || E'\n', 'UTF8')
 WHERE status BETWEEN 200 AND 299
   AND header ->> 'Content-Type' = 'application/json'
   AND position('"secret":"whsec_'::bytea IN body) > 0
   AND convert_from(body, 'UTF8')::jsonb ? 'secret';

-- A new row always names its scope.
ALTER TABLE idempotency_keys ALTER COLUMN scope DROP DEFAULT,
    DROP CONSTRAINT idempotency_keys_pkey,
    ADD PRIMARY KEY (merchant_id, scope, key);
-- hearth_idempotency_complete and the release match an attempt by its token
-- (one per claim), so they need no scope.
