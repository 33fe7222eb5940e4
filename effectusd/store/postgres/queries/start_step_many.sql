-- start_step for a whole batch (arrays, one element per step).
UPDATE effectus_saga_steps s
SET state = 'in_progress', args = r.args::jsonb, args_hash = r.args_hash, updated_at = now()
FROM unnest(%(saga_id)s::text[], %(effect_id)s::text[], %(args)s::text[], %(args_hash)s::text[])
     AS r(saga_id, effect_id, args, args_hash)
WHERE s.saga_id = r.saga_id AND s.effect_id = r.effect_id AND s.state = 'pending'
