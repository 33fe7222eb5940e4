SELECT dispatch_id, saga_id, effect_id, direction, delivery, verb, contract_hash, destination,
       state, attempt, max_attempts, budget_base, uncertain_attempt, fence_waits, lease_token,
       unsent, ((julianday('now') - 2440587.5) * 86400.0) - budget_since AS budget_elapsed_s,
       idempotency_key, args_hash, method, path, fencing_resources, timeout_ms
FROM effectus_saga_outbox
WHERE saga_id = :saga_id
ORDER BY dispatch_id
