SELECT o.dispatch_id, o.saga_id, o.effect_id, o.direction, o.delivery, o.verb, o.destination,
       o.state, o.attempt, o.max_attempts, o.budget_base, o.uncertain_attempt, o.fence_waits,
       o.lease_token,
       o.lease_expires_at < now() AS lease_expired
FROM effectus_saga_outbox o
WHERE o.dispatch_id = ANY(%(dispatch_ids)s::bigint[])
ORDER BY o.dispatch_id
FOR UPDATE OF o
