UPDATE effectus_dest_keys
SET state = 'completed',
    status_code = :status_code,
    response_body = :response_body,
    outcome = :outcome,
    fencing_acknowledged = :fencing_acknowledged,
    completed_at = (julianday('now') - 2440587.5) * 86400.0,
    expires_at = (julianday('now') - 2440587.5) * 86400.0 + :retention
WHERE idempotency_key = :key AND state = 'in_progress'
RETURNING 1
