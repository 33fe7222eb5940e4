-- `sagas show --execution-id ID [--plan PLAN]`: one saga per plan run under that id.
SELECT saga_id, execution_id, plan_id, state
FROM effectus_saga_instances
WHERE namespace = :namespace AND execution_id = :execution_id
  AND (:plan_id IS NULL OR plan_id = :plan_id)
ORDER BY plan_id
LIMIT coalesce(:limit, -1)
