-- retry_delay_s NULL: next_attempt_at stays as it is.
UPDATE effectus_saga_outbox
SET state = :state,
    next_attempt_at = CASE WHEN :retry_delay_s IS NULL THEN next_attempt_at
                           ELSE ((julianday('now') - 2440587.5) * 86400.0) + :retry_delay_s
                      END,
    uncertain_attempt = :uncertain_attempt, last_outcome = :last_outcome,
    last_error = :last_error, lease_owner = NULL, lease_token = NULL,
    lease_expires_at = NULL, updated_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE dispatch_id = :dispatch_id
