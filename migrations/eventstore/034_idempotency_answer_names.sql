-- The stored Idempotency-Key answers by the ids they name. An erasure
-- deletes the merchant's answers that name its subject or one of its
-- streams (adapters/pubsub, queueForgetAnswers), inside the transaction
-- that holds the subject's lock, under the request path's statement
-- timeout. It searched every answer of the merchant (IDEMPOTENCY_KEEP of
-- its writes with a key, and of its console forms) for every one of those
-- ids: the erasure of a busy merchant's customer with many orders cost
-- more the more the merchant wrote, until it no longer fitted in the
-- timeout. Now it asks this index for the answers naming any of them.

-- The UUIDs an answer's body names (ids in a JSON body, a console form's
-- page path), in any case. encode(..., 'escape') reads any bytes, so an
-- answer that is not UTF-8 is indexed too, never refused. OR REPLACE and
-- IF NOT EXISTS: an operator may create both first, the index
-- concurrently (docs/operations.md, Upgrades).
CREATE OR REPLACE FUNCTION hearth_answer_names(body bytea) RETURNS uuid[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(DISTINCT m[1]::uuid), '{}')
    FROM regexp_matches(encode(body, 'escape'),
        '([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})', 'gi') AS m
$$;

CREATE INDEX IF NOT EXISTS idempotency_keys_names ON idempotency_keys
    USING gin (hearth_answer_names(body)) WHERE body IS NOT NULL;
