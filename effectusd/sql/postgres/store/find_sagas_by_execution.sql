-- `sagas show --execution-id ID [--plan PLAN]`: one saga per plan run under that id.
SELECT saga_id, execution_id, plan_id, state
FROM effectus_saga_instances
WHERE namespace = %(namespace)s AND execution_id = %(execution_id)s
  AND (%(plan_id)s::text IS NULL OR plan_id = %(plan_id)s)
ORDER BY plan_id
LIMIT %(limit)s
