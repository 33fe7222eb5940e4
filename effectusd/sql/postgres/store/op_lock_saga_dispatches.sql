SELECT dispatch_id, saga_id, effect_id, direction, delivery, verb, contract_hash, destination,
       state, attempt, max_attempts, budget_base, uncertain_attempt, fence_waits, lease_token,
       unsent, extract(epoch FROM now() - budget_since)::float8 AS budget_elapsed_s,
       idempotency_key, args_hash, method, path, fencing_resources, timeout_ms
FROM effectus_saga_outbox
WHERE saga_id = %(saga_id)s
ORDER BY dispatch_id
FOR UPDATE
