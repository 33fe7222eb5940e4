-- A step state no dispatch can say (a step that failed at enqueue has none): every other is
-- read from the step's dispatches (effectusd/core/steps.py). A submit writes no step row
-- (migration 10018), so this one is made now, its pins copied from the saga's pinned plan,
-- which is what every reader reads them from; a saga submitted before has its row already.
INSERT INTO effectus_saga_steps
    (saga_id, effect_id, sequence, verb, contract_hash, compensation, state)
SELECT s.saga_id, :effect_id, json_extract(p.value, '$.sequence'),
       json_extract(p.value, '$.verb'), json_extract(p.value, '$.contract_hash'),
       json_extract(p.value, '$.compensate'), :state
FROM effectus_saga_instances s, json_each(s.plan, '$.steps') p
WHERE s.saga_id = :saga_id AND json_extract(p.value, '$.id') = :effect_id
ON CONFLICT (saga_id, effect_id) DO UPDATE
SET state = excluded.state, updated_at = ((julianday('now') - 2440587.5) * 86400.0)
