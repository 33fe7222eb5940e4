-- The dispatches being settled and, in the same dispatch_id order, every forward dispatch of
-- their sagas not yet sent (queued or retry_wait): the engine may cancel such a sibling of a
-- parallel step (docs/design.md section 4; the recorder passes only the sagas whose plan has
-- parallel steps), and the claim (SKIP LOCKED) must not take it
-- between our reading the facts and the cancel. Called after the sagas are locked (the lock
-- order: sagas, then dispatches). A sibling a claim took meanwhile is skipped here once the
-- claim commits (its state no longer matches: the WHERE below is checked again on the row
-- version the lock waited for), and the facts read next show it in flight.
-- The rows are found by key (the ids, then each saga's forward dispatches through its unique
-- key) whatever the plan: with `saga_id = ANY(...) AND state IN (...)` alone the planner,
-- without the arrays' values or without statistics, read every ready row of the outbox.
WITH wanted AS (
    SELECT unnest(%(dispatch_ids)s::bigint[]) AS dispatch_id
    UNION
    SELECT sibling.dispatch_id
    FROM unnest(%(saga_ids)s::text[]) AS s(saga_id)
    CROSS JOIN LATERAL (
        -- by the saga's key alone (OFFSET 0 keeps the state test out here: with it the
        -- planner ANDed in the whole ready index, once per saga)
        SELECT f.dispatch_id, f.state
        FROM effectus_saga_outbox f
        WHERE f.saga_id = s.saga_id AND f.direction = 'forward'
        OFFSET 0
    ) AS sibling
    WHERE sibling.state IN ('queued', 'retry_wait')
)
SELECT o.dispatch_id, o.saga_id, o.effect_id, o.direction, o.delivery, o.verb, o.destination,
       o.state, o.attempt, o.max_attempts, o.budget_base, o.uncertain_attempt, o.fence_waits,
       o.unsent, extract(epoch FROM now() - o.budget_since)::float8 AS budget_elapsed_s,
       o.lease_token::text AS lease_token, o.fencing_resources <> '[]'::jsonb AS fenced,
       o.lease_expires_at < now() AS lease_expired
FROM effectus_saga_outbox o
WHERE o.dispatch_id = ANY (ARRAY(SELECT dispatch_id FROM wanted))
  AND (o.dispatch_id = ANY(%(dispatch_ids)s::bigint[])
       OR (o.saga_id = ANY(%(saga_ids)s::text[]) AND o.direction = 'forward'
           AND o.state IN ('queued', 'retry_wait')))
ORDER BY o.dispatch_id
FOR UPDATE OF o
