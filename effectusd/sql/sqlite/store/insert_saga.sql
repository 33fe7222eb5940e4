-- The saga identity is deterministic: a second submit of the same identity inserts nothing,
-- and neither does one of a pruned saga's identity (its tombstone: 10005_saga_tombstones).
INSERT INTO effectus_saga_instances
    (saga_id, namespace, execution_id, plan_id, plan_digest, plan, facts, facts_hash,
     trace_context)
SELECT :saga_id, :namespace, :execution_id, :plan_id, :plan_digest, :plan, :facts, :facts_hash,
       :trace_context
WHERE NOT EXISTS (SELECT 1 FROM effectus_saga_tombstones WHERE saga_id = :saga_id)
ON CONFLICT (saga_id) DO NOTHING
RETURNING saga_id
