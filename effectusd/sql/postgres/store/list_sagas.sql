SELECT saga_id, execution_id, plan_id, state, stop_reason, created_at, updated_at
FROM effectus_saga_instances s
WHERE (%(states)s::text[] IS NULL OR state = ANY(%(states)s::text[]))
  AND (%(plan_id)s::text IS NULL OR plan_id = %(plan_id)s)
  AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s)
  AND (%(execution_id)s::text IS NULL OR execution_id = %(execution_id)s)
  AND (%(destination)s::text IS NULL OR EXISTS (
       SELECT 1 FROM effectus_saga_outbox o
       WHERE o.saga_id = s.saga_id AND o.destination = %(destination)s))
  AND (%(older_than_s)s::float8 IS NULL
       OR created_at < now() - make_interval(secs => %(older_than_s)s::float8))
ORDER BY created_at DESC, saga_id
LIMIT %(limit)s
