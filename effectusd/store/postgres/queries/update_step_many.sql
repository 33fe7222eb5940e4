-- update_step for a whole batch (arrays, one element per step; each step at most once, see
-- TransitionRows, since UPDATE ... FROM applies one source row per target row).
UPDATE effectus_saga_steps s
SET state = r.state,
    result = CASE WHEN r.set_result THEN r.result::jsonb ELSE s.result END,
    args = coalesce(r.args::jsonb, s.args),
    args_hash = coalesce(r.args_hash, s.args_hash),
    updated_at = now()
FROM unnest(%(saga_id)s::text[], %(effect_id)s::text[], %(state)s::text[],
            %(set_result)s::bool[], %(result)s::text[], %(args)s::text[], %(args_hash)s::text[])
     AS r(saga_id, effect_id, state, set_result, result, args, args_hash)
WHERE s.saga_id = r.saga_id AND s.effect_id = r.effect_id
