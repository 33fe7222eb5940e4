SELECT audit_id, action, actor, evidence, forced, status_code, outcome, at
FROM effectus_dest_key_audit
WHERE idempotency_key = :key
ORDER BY audit_id
