UPDATE effectus_dest_keys
SET state = 'completed',
    status_code = %(status_code)s,
    response_body = %(response_body)s,
    outcome = %(outcome)s,
    fencing_acknowledged = %(fencing_acknowledged)s,
    completed_at = now(),
    expires_at = now() + %(retention)s
WHERE idempotency_key = %(key)s AND state = 'in_progress'
RETURNING 1
