SELECT saga_id, namespace, execution_id, plan_id, plan_digest, plan, facts, state, stop_reason,
       cancel_requested_at, cancel_requested_by, revision, created_at, updated_at, finished_at
FROM effectus_saga_instances WHERE saga_id = :saga_id
