UPDATE effectus_saga_attempts
SET outcome = %(outcome)s, settled_by = %(settled_by)s, status_code = %(status_code)s,
    error = %(error)s, evidence = %(evidence)s::jsonb,
    fencing_status = coalesce(%(fencing_status)s, fencing_status),
    completed_at = clock_timestamp()
WHERE dispatch_id = %(dispatch_id)s AND attempt = %(attempt)s AND outcome IS NULL
