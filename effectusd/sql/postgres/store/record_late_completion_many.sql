-- record_late_completion for a whole batch (a JSON array of rows, one object per attempt).
UPDATE effectus_saga_attempts a
SET late = true, late_outcome = r.outcome, late_status_code = r.status_code,
    late_error = r.error, late_evidence = r.evidence::jsonb, late_at = clock_timestamp()
FROM json_to_recordset(%(rows)s::json) AS r(
        dispatch_id bigint, attempt int, outcome text, status_code int, error text,
        evidence text
     )
WHERE a.dispatch_id = r.dispatch_id AND a.attempt = r.attempt
