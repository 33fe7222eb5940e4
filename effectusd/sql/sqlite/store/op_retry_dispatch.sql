-- An operator sends a blocked dispatch again: same row, same idempotency key; due now, with a
-- fresh retry budget (counted from the attempts made so far), no uncertain attempt (the
-- operator settled that question), a fence wait that starts over and a time budget that
-- starts again at the next claim.
UPDATE effectus_saga_outbox
SET state = 'retry_wait',
    next_attempt_at = ((julianday('now') - 2440587.5) * 86400.0),
    uncertain_attempt = NULL,
    fence_wait_since = NULL,
    budget_since = NULL,
    max_attempts = :max_attempts,
    budget_base = :budget_base,
    updated_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE dispatch_id = :dispatch_id AND state = :expected_state
RETURNING dispatch_id
