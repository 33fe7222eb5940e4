-- The result of a forward step's success and its place in the order of successes are written
-- here, on its dispatch's row (migration 10016): NULL for every other settlement. unsent: 1
-- when the attempt settled ended before its request was written (migration 10024), else 0.
-- gives_up_in_s: a retry under the time budget, how long that budget has left (else NULL).
UPDATE effectus_saga_outbox
SET state = %(state)s,
    next_attempt_at = CASE WHEN %(retry_delay_s)s::float8 IS NULL THEN next_attempt_at
                           ELSE now() + make_interval(secs => %(retry_delay_s)s::float8) END,
    uncertain_attempt = %(uncertain_attempt)s, last_outcome = %(last_outcome)s,
    last_error = %(last_error)s, result = %(result)s::jsonb,
    succeeded_order = %(succeeded_order)s::int, unsent = unsent + %(unsent)s::int,
    gives_up_at = now() + make_interval(secs => %(gives_up_in_s)s::float8), lease_owner = NULL, lease_token = NULL,
    lease_expires_at = NULL, updated_at = now()
WHERE dispatch_id = %(dispatch_id)s
