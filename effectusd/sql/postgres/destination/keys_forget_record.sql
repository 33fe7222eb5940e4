-- A forgotten key's record, copied to the audit before keys_forget_delete removes it.
INSERT INTO effectus_dest_key_audit (
    idempotency_key, action, actor, evidence, forced, argument_hash, status_code,
    response_body, outcome, saga_id, effect_id, direction, verb, attempt, key_created_at,
    key_completed_at
)
SELECT idempotency_key, 'forget', %(actor)s, %(evidence)s, %(forced)s, argument_hash,
       status_code, response_body, outcome, saga_id, effect_id, direction, verb, attempt,
       created_at, completed_at
FROM effectus_dest_keys
WHERE idempotency_key = %(key)s AND state = 'completed'
RETURNING audit_id
