-- Seconds until the earliest queued or retrying row becomes due (NULL: nothing waits).
SELECT min(next_attempt_at) - ((julianday('now') - 2440587.5) * 86400.0) AS seconds
FROM effectus_saga_outbox
WHERE state IN ('queued', 'retry_wait')
  AND destination IN (SELECT value FROM json_each(:destinations))
