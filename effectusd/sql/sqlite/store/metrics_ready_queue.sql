SELECT count(*) AS depth,
       coalesce(((julianday('now') - 2440587.5) * 86400.0) - min(next_attempt_at), 0.0)
           AS oldest_s
FROM effectus_saga_outbox
WHERE state IN ('queued', 'retry_wait')
  AND next_attempt_at <= ((julianday('now') - 2440587.5) * 86400.0)
