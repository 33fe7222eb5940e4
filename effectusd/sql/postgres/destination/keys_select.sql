-- One key's whole record, for an operator. FOR UPDATE: a forget holds it until it ends.
SELECT idempotency_key, argument_hash, state, status_code, response_body, outcome,
       fencing_acknowledged, saga_id, effect_id, direction, verb, request_id, attempt,
       created_at, completed_at, expires_at
FROM effectus_dest_keys
WHERE idempotency_key = %(key)s
FOR UPDATE
