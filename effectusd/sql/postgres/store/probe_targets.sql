-- What a probe of each taken dispatch needs (its key, identity, arguments and the saga's
-- facts), and what its settlement is guarded on: the row's state, attempt, lease token and
-- uncertain attempt as they are now. Read by key; the settlement locks them itself. requests:
-- the X-Effectus-Attempt its latest request carried (claims that ended unsent aside).
SELECT o.dispatch_id, o.saga_id, o.effect_id, o.direction, o.execution_id, o.destination,
       o.verb, o.contract_hash, o.args_canonical, o.args_hash, o.idempotency_key, o.state,
       o.attempt, o.lease_token, o.uncertain_attempt, o.created_at, a.lease_expires_at AS deadline,
       s.facts, o.attempt - o.unsent AS requests
FROM effectus_saga_outbox o
JOIN effectus_saga_instances s ON s.saga_id = o.saga_id
JOIN effectus_saga_attempts a ON a.dispatch_id = o.dispatch_id AND a.attempt = o.attempt
WHERE o.dispatch_id = ANY(%(dispatch_ids)s::bigint[])
ORDER BY o.dispatch_id
