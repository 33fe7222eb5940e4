-- update_dispatch_settled for a whole batch (a JSON array of rows, one object per dispatch).
-- unsent: 1 when the attempt settled ended before its request was written (migration 10024);
-- gives_up_in_s: a retry under the time budget, how long that budget has left (else NULL).
UPDATE effectus_saga_outbox o
SET state = r.state,
    next_attempt_at = CASE WHEN r.retry_delay_s IS NULL THEN o.next_attempt_at
                           ELSE now() + make_interval(secs => r.retry_delay_s) END,
    uncertain_attempt = r.uncertain_attempt, last_outcome = r.last_outcome,
    last_error = r.last_error, result = r.result::jsonb, succeeded_order = r.succeeded_order,
    unsent = o.unsent + r.unsent,
    gives_up_at = now() + make_interval(secs => r.gives_up_in_s),
    lease_owner = NULL, lease_token = NULL,
    lease_expires_at = NULL, updated_at = now()
FROM json_to_recordset(%(rows)s::json) AS r(
        dispatch_id bigint, state text, retry_delay_s float8, uncertain_attempt int,
        last_outcome text, last_error text, result text, succeeded_order int, unsent int,
        gives_up_in_s float8
     )
WHERE o.dispatch_id = r.dispatch_id
