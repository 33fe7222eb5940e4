-- retry_delay_s NULL: next_attempt_at stays as it is. The result of a forward step's success
-- and its place in the order of successes are written here (migration 10016), else NULL.
-- unsent: 1 when the attempt settled ended before its request was written (migration 10024);
-- gives_up_in_s: a retry under the time budget, how long that budget has left (else NULL).
UPDATE effectus_saga_outbox
SET state = :state,
    next_attempt_at = CASE WHEN :retry_delay_s IS NULL THEN next_attempt_at
                           ELSE ((julianday('now') - 2440587.5) * 86400.0) + :retry_delay_s
                      END,
    uncertain_attempt = :uncertain_attempt, last_outcome = :last_outcome,
    last_error = :last_error, result = :result, succeeded_order = :succeeded_order,
    unsent = unsent + :unsent,
    gives_up_at = ((julianday('now') - 2440587.5) * 86400.0) + :gives_up_in_s,
    lease_owner = NULL, lease_token = NULL,
    lease_expires_at = NULL, updated_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE dispatch_id = :dispatch_id
