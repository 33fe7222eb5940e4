UPDATE effectus_saga_attempts
SET outcome = :outcome, settled_by = :settled_by, status_code = :status_code,
    error = :error, evidence = :evidence,
    fencing_status = coalesce(:fencing_status, fencing_status),
    completed_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE dispatch_id = :dispatch_id AND attempt = :attempt AND outcome IS NULL
