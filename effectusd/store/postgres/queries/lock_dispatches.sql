-- The dispatches being settled and, in the same dispatch_id order, every forward dispatch of
-- their sagas not yet sent (queued or retry_wait): the engine may cancel such a sibling of a
-- parallel step (docs/design.md section 4), and the claim (SKIP LOCKED) must not take it
-- between our reading the facts and the cancel. Called after the sagas are locked (the lock
-- order: sagas, then dispatches). A sibling a claim took meanwhile is skipped here once the
-- claim commits (its state no longer matches), and the facts read next show it in flight.
SELECT o.dispatch_id, o.saga_id, o.effect_id, o.direction, o.delivery, o.verb, o.destination,
       o.state, o.attempt, o.max_attempts, o.budget_base, o.uncertain_attempt, o.fence_waits,
       o.lease_token, o.fencing_resources <> '[]'::jsonb AS fenced,
       o.lease_expires_at < now() AS lease_expired
FROM effectus_saga_outbox o
WHERE o.dispatch_id = ANY(%(dispatch_ids)s::bigint[])
   OR (o.saga_id = ANY(%(saga_ids)s::text[]) AND o.direction = 'forward'
       AND o.state IN ('queued', 'retry_wait'))
ORDER BY o.dispatch_id
FOR UPDATE OF o
