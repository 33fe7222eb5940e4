INSERT INTO effectus_dest_keys (
    idempotency_key, argument_hash, state, saga_id, effect_id, direction, verb, request_id,
    attempt, expires_at
)
VALUES (
    :key, :argument_hash, 'in_progress', :saga_id, :effect_id, :direction,
    :verb, :request_id, :attempt, (julianday('now') - 2440587.5) * 86400.0 + :retention
)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING 1
