-- A step move its dispatches cannot say (a step that failed at enqueue has none): every other
-- is read from them (effectusd/core/steps.py, migration 10016).
UPDATE effectus_saga_steps
SET state = %(state)s, updated_at = now()
WHERE saga_id = %(saga_id)s AND effect_id = %(effect_id)s
