-- settle_attempt for a whole batch in one statement: each parameter is an array, one element
-- per attempt (the runner turns the rows of an executemany into these columns).
UPDATE effectus_saga_attempts a
SET outcome = r.outcome, settled_by = r.settled_by, status_code = r.status_code,
    error = r.error, evidence = r.evidence::jsonb,
    fencing_status = coalesce(r.fencing_status, a.fencing_status),
    completed_at = clock_timestamp()
FROM unnest(%(dispatch_id)s::bigint[], %(attempt)s::int[], %(outcome)s::text[],
            %(settled_by)s::text[], %(status_code)s::int[], %(error)s::text[],
            %(evidence)s::text[], %(fencing_status)s::text[])
     AS r(dispatch_id, attempt, outcome, settled_by, status_code, error, evidence,
          fencing_status)
WHERE a.dispatch_id = r.dispatch_id AND a.attempt = r.attempt AND a.outcome IS NULL
