-- A saga's steps as the views show them: the state derived from the step's dispatches'
-- (effectusd/core/steps.py, with the row's own where it has none), its resolved arguments'
-- hash, result and order of success its forward dispatch's (migration 10016).
SELECT st.effect_id, st.sequence, st.verb, st.contract_hash, st.compensation, st.fencing,
       st.state, o.args_hash, o.result, o.succeeded_order, o.state AS dispatch_state,
       c.state AS compensation_state
FROM effectus_saga_steps st
LEFT JOIN effectus_saga_outbox o
    ON o.saga_id = st.saga_id AND o.effect_id = st.effect_id AND o.direction = 'forward'
LEFT JOIN effectus_saga_outbox c
    ON c.saga_id = st.saga_id AND c.effect_id = st.effect_id AND c.direction = 'compensation'
WHERE st.saga_id = :saga_id ORDER BY st.sequence
