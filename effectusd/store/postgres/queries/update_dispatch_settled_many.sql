-- update_dispatch_settled for a whole batch (arrays, one element per dispatch).
UPDATE effectus_saga_outbox o
SET state = r.state,
    next_attempt_at = CASE WHEN r.retry_delay_s IS NULL THEN o.next_attempt_at
                           ELSE now() + make_interval(secs => r.retry_delay_s) END,
    uncertain_attempt = r.uncertain_attempt, last_outcome = r.last_outcome,
    last_error = r.last_error, lease_owner = NULL, lease_token = NULL,
    lease_expires_at = NULL, updated_at = now()
FROM unnest(%(dispatch_id)s::bigint[], %(state)s::text[], %(retry_delay_s)s::float8[],
            %(uncertain_attempt)s::int[], %(last_outcome)s::text[], %(last_error)s::text[])
     AS r(dispatch_id, state, retry_delay_s, uncertain_attempt, last_outcome, last_error)
WHERE o.dispatch_id = r.dispatch_id
