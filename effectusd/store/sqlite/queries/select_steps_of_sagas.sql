SELECT saga_id, effect_id, sequence, state, result
FROM effectus_saga_steps
WHERE saga_id IN (SELECT value FROM json_each(:saga_ids))
