-- The steps of the sagas being settled, each with the state of its forward dispatch and
-- whether an attempt of it may have committed (one forward row per step): with parallel
-- steps the engine decides from its siblings' dispatches (docs/design.md section 4). A step's
-- state is derived from its dispatches' (effectusd/core/steps.py: the forward one's, its
-- compensation's, and the row's own where it has none), and the result and order of its
-- success are its forward dispatch's (migration 10016).
SELECT st.saga_id, st.effect_id, st.sequence, st.state, o.result, o.succeeded_order,
       o.state AS dispatch_state,
       o.uncertain_attempt IS NOT NULL AS "uncertain [boolean]",
       c.state AS compensation_state
FROM effectus_saga_steps st
LEFT JOIN effectus_saga_outbox o
    ON o.saga_id = st.saga_id AND o.effect_id = st.effect_id AND o.direction = 'forward'
LEFT JOIN effectus_saga_outbox c
    ON c.saga_id = st.saga_id AND c.effect_id = st.effect_id AND c.direction = 'compensation'
WHERE st.saga_id IN (SELECT value FROM json_each(:saga_ids))
