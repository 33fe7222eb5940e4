SELECT count(*) AS depth,
       coalesce(extract(epoch FROM now() - min(next_attempt_at)), 0)::float8 AS oldest_s
FROM effectus_saga_outbox
WHERE state IN ('queued', 'retry_wait') AND next_attempt_at <= now()
