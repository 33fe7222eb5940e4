SELECT dispatch_id, effect_id, direction, destination, verb, contract_hash, delivery, method, path,
       args_hash, idempotency_key, fencing_resources, state, attempt, max_attempts,
       lease_owner, lease_expires_at, next_attempt_at, grants, uncertain_attempt,
       last_outcome, last_error, created_at, updated_at
FROM effectus_saga_outbox WHERE saga_id = :saga_id ORDER BY dispatch_id
