-- A completion whose guard failed changes no state, but its evidence is kept on its attempt.
UPDATE effectus_saga_attempts
SET late = true, late_outcome = %(outcome)s, late_status_code = %(status_code)s,
    late_error = %(error)s, late_evidence = %(evidence)s::jsonb, late_at = clock_timestamp()
WHERE dispatch_id = %(dispatch_id)s AND attempt = %(attempt)s
