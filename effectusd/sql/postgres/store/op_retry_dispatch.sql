-- An operator sends a blocked dispatch again: same row, same idempotency key; due now, with a
-- fresh retry budget (counted from the attempts made so far), no uncertain attempt (the
-- operator settled that question), a fence wait that starts over and a time budget that
-- starts again at the next claim.
UPDATE effectus_saga_outbox
SET state = 'retry_wait',
    next_attempt_at = now(),
    uncertain_attempt = NULL,
    fence_wait_since = NULL,
    budget_since = NULL,
    max_attempts = %(max_attempts)s,
    budget_base = %(budget_base)s,
    updated_at = now()
WHERE dispatch_id = %(dispatch_id)s AND state = %(expected_state)s
RETURNING dispatch_id
