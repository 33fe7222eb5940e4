-- What `prune --dry-run` would delete.
SELECT saga_id, state, plan_id, execution_id, finished_at
FROM effectus_saga_instances
WHERE finished_at < :cutoff
  AND state IN ('completed', 'compensated', 'failed')
ORDER BY finished_at, saga_id
