-- A completion whose guard failed changes no state, but its evidence is kept on its attempt.
UPDATE effectus_saga_attempts
SET late = 1, late_outcome = :outcome, late_status_code = :status_code,
    late_error = :error, late_evidence = :evidence,
    late_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE dispatch_id = :dispatch_id AND attempt = :attempt
