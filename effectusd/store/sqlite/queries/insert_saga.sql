-- The saga identity is deterministic: a second submit of the same identity inserts nothing.
INSERT INTO effectus_saga_instances
    (saga_id, namespace, execution_id, plan_id, plan_digest, plan, facts, facts_hash)
VALUES
    (:saga_id, :namespace, :execution_id, :plan_id, :plan_digest,
     :plan, :facts, :facts_hash)
ON CONFLICT (saga_id) DO NOTHING
RETURNING saga_id
