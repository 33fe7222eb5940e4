UPDATE effectus_saga_steps
SET state = %(state)s,
    result = CASE WHEN %(set_result)s THEN %(result)s::jsonb ELSE result END,
    args = coalesce(%(args)s::jsonb, args),
    args_hash = coalesce(%(args_hash)s, args_hash),
    succeeded_order = coalesce(%(succeeded_order)s::int, succeeded_order),
    updated_at = now()
WHERE saga_id = %(saga_id)s AND effect_id = %(effect_id)s
