-- record_late_completion for a whole batch (arrays, one element per attempt).
UPDATE effectus_saga_attempts a
SET late = true, late_outcome = r.outcome, late_status_code = r.status_code,
    late_error = r.error, late_evidence = r.evidence::jsonb, late_at = clock_timestamp()
FROM unnest(%(dispatch_id)s::bigint[], %(attempt)s::int[], %(outcome)s::text[],
            %(status_code)s::int[], %(error)s::text[], %(evidence)s::text[])
     AS r(dispatch_id, attempt, outcome, status_code, error, evidence)
WHERE a.dispatch_id = r.dispatch_id AND a.attempt = r.attempt
