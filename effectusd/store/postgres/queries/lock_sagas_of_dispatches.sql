-- Outcome recording locks sagas first (in id order), then their dispatches: the same order
-- operator actions use, so the two never deadlock. NO KEY UPDATE: the saga's key never
-- changes, and a claim's event insert (a foreign-key share lock) must not wait on us.
SELECT s.saga_id, s.namespace, s.execution_id, s.state, s.plan_digest, s.plan, s.facts,
       s.cancel_requested_at IS NOT NULL AS cancel_requested
FROM effectus_saga_instances s
WHERE s.saga_id IN (
    SELECT saga_id FROM effectus_saga_outbox WHERE dispatch_id = ANY(%(dispatch_ids)s::bigint[])
)
ORDER BY s.saga_id
FOR NO KEY UPDATE OF s
