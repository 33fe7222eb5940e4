SELECT saga_id, execution_id, plan_id, state, stop_reason, created_at, updated_at
FROM effectus_saga_instances s
WHERE (:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
  AND (:plan_id IS NULL OR plan_id = :plan_id)
  AND (:namespace IS NULL OR namespace = :namespace)
  AND (:execution_id IS NULL OR execution_id = :execution_id)
  AND (:destination IS NULL OR EXISTS (
       SELECT 1 FROM effectus_saga_outbox o
       WHERE o.saga_id = s.saga_id AND o.destination = :destination))
  AND (:older_than_s IS NULL
       OR created_at < ((julianday('now') - 2440587.5) * 86400.0) - :older_than_s)
ORDER BY created_at DESC, saga_id
LIMIT coalesce(:limit, -1)
