-- A step state no dispatch can say (a step that failed at enqueue has none): every other is
-- read from the step's dispatches (effectusd/core/steps.py). A submit writes no step row
-- (migration 10018), so this one is made now, its pins copied from the saga's pinned plan,
-- which is what every reader reads them from; a saga submitted before has its row already.
INSERT INTO effectus_saga_steps
    (saga_id, effect_id, sequence, verb, contract_hash, compensation, state)
SELECT s.saga_id, p.id, p.sequence, p.verb, p.contract_hash, p.compensate, %(state)s
FROM effectus_saga_instances s
CROSS JOIN LATERAL jsonb_to_recordset(s.plan -> 'steps')
    AS p(id text, sequence int, verb text, contract_hash text, compensate jsonb)
WHERE s.saga_id = %(saga_id)s AND p.id = %(effect_id)s
ON CONFLICT (saga_id, effect_id) DO UPDATE
SET state = EXCLUDED.state, updated_at = now()
