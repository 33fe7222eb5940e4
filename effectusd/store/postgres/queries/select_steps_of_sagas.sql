SELECT saga_id, effect_id, sequence, state, result
FROM effectus_saga_steps
WHERE saga_id = ANY(%(saga_ids)s::text[])
