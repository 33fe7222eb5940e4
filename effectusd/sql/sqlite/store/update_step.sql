-- A step move its dispatches cannot say (a step that failed at enqueue has none): every other
-- is read from them (effectusd/core/steps.py, migration 10016).
UPDATE effectus_saga_steps
SET state = :state, updated_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE saga_id = :saga_id AND effect_id = :effect_id
