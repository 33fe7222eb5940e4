-- update_step for a whole batch (a JSON array of rows, one object per step; each step at
-- most once, see TransitionRows, since UPDATE ... FROM applies one source row per target row).
UPDATE effectus_saga_steps s
SET state = r.state,
    result = CASE WHEN r.set_result THEN r.result::jsonb ELSE s.result END,
    args = coalesce(r.args::jsonb, s.args),
    args_hash = coalesce(r.args_hash, s.args_hash),
    succeeded_order = coalesce(r.succeeded_order, s.succeeded_order),
    updated_at = now()
FROM jsonb_to_recordset(%(rows)s::jsonb) AS r(
        saga_id text, effect_id text, state text, set_result bool, result text,
        args text, args_hash text, succeeded_order int
     )
WHERE s.saga_id = r.saga_id AND s.effect_id = r.effect_id
