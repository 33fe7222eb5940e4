-- One batch of finished sagas older than the cutoff. Steps, outbox rows, attempts and the
-- timeline go with them (ON DELETE CASCADE). Live and blocked sagas have no finished_at.
WITH doomed AS (
    SELECT saga_id
    FROM effectus_saga_instances
    WHERE finished_at < %(cutoff)s
      AND state IN ('completed', 'compensated', 'failed')
    ORDER BY finished_at, saga_id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM effectus_saga_instances s
USING doomed
WHERE s.saga_id = doomed.saga_id
RETURNING s.saga_id, s.state, s.finished_at
