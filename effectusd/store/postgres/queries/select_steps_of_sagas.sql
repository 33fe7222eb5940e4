-- The steps of the sagas being settled, each with the state of its forward dispatch and
-- whether an attempt of it may have committed (one forward row per step): with parallel
-- steps the engine decides from its siblings' dispatches (docs/design.md section 4).
-- Both tables are given the batch's ids, each as an array taken once: the planner then looks
-- the few rows up by key, with statistics or without (with a literal list of hundreds of ids
-- and no statistics it guesses "every row", and read every forward dispatch per record).
SELECT st.saga_id, st.effect_id, st.sequence, st.state, st.result, st.succeeded_order,
       o.state AS dispatch_state, o.uncertain_attempt IS NOT NULL AS uncertain
FROM effectus_saga_steps st
LEFT JOIN effectus_saga_outbox o
    ON o.saga_id = st.saga_id AND o.effect_id = st.effect_id AND o.direction = 'forward'
   AND o.saga_id = ANY (ARRAY(SELECT unnest(%(saga_ids)s::text[])))
WHERE st.saga_id = ANY (ARRAY(SELECT unnest(%(saga_ids)s::text[])))
