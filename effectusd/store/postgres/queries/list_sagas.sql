SELECT saga_id, execution_id, plan_id, state, stop_reason, created_at, updated_at
FROM effectus_saga_instances
WHERE (%(state)s::text IS NULL OR state = %(state)s)
  AND (%(plan_id)s::text IS NULL OR plan_id = %(plan_id)s)
  AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
  AND (%(older_than_s)s::float8 IS NULL
       OR created_at < now() - make_interval(secs => %(older_than_s)s::float8))
ORDER BY created_at DESC, saga_id
LIMIT %(limit)s
