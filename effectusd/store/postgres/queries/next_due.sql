-- Seconds until the earliest queued or retrying row becomes due (NULL: nothing waits).
SELECT extract(epoch FROM min(next_attempt_at) - now())::float8 AS seconds
FROM effectus_saga_outbox
WHERE state IN ('queued', 'retry_wait') AND destination = ANY(%(destinations)s::text[])
