-- The first step of a claim (PostgreSQL does it all in claim_ready): the due rows of one
-- destination, oldest first, read from the partial "ready" index only. No SKIP LOCKED: the
-- claim runs under BEGIN IMMEDIATE, the one writer, and claim_mark marks these rows next.
SELECT dispatch_id, state
FROM effectus_saga_outbox
WHERE state IN ('queued', 'retry_wait')
  AND destination = :destination
  AND next_attempt_at <= ((julianday('now') - 2440587.5) * 86400.0)
ORDER BY next_attempt_at
LIMIT coalesce(:limit, -1)
