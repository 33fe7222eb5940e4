INSERT INTO effectus_dest_keys (
    idempotency_key, argument_hash, state, saga_id, effect_id, direction, verb, request_id,
    attempt, expires_at
)
VALUES (
    %(key)s, %(argument_hash)s, 'in_progress', %(saga_id)s, %(effect_id)s, %(direction)s,
    %(verb)s, %(request_id)s, %(attempt)s, now() + %(retention)s
)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING 1
