-- One batch of finished sagas older than the cutoff. Steps, outbox rows, attempts and the
-- timeline go with them (ON DELETE CASCADE). Live and blocked sagas have no finished_at.
DELETE FROM effectus_saga_instances
WHERE saga_id IN (
    SELECT saga_id
    FROM effectus_saga_instances
    WHERE finished_at < :cutoff
      AND state IN ('completed', 'compensated', 'failed')
    ORDER BY finished_at, saga_id
    LIMIT coalesce(:limit, -1)
)
RETURNING saga_id, state, finished_at
