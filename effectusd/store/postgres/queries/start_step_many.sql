-- start_step for a whole batch (a JSON array of rows, one object per step).
UPDATE effectus_saga_steps s
SET state = 'in_progress', args = r.args::jsonb, args_hash = r.args_hash, updated_at = now()
FROM jsonb_to_recordset(%(rows)s::jsonb) AS r(
        saga_id text, effect_id text, args text, args_hash text
     )
WHERE s.saga_id = r.saga_id AND s.effect_id = r.effect_id AND s.state = 'pending'
