-- The steps of the sagas being settled, each with the state of its forward dispatch and
-- whether an attempt of it may have committed (one forward row per step): with parallel
-- steps the engine decides from its siblings' dispatches (docs/design.md section 4). A step's
-- state is derived from its dispatches' (effectusd/core/steps.py: the forward one's, its
-- compensation's, and the row's own where it has none), and the result and order of its
-- success are its forward dispatch's (migration 10016).
-- The steps are found by the batch's ids, taken once as an array, and each step's dispatches
-- by their unique key (LIMIT 1 keeps each lookup a per-step index probe): key lookups
-- whatever the statistics. Without statistics the planner otherwise either read every forward
-- dispatch (a literal list of ids looks like "every row") or, over a small outbox, joined each
-- step to all of the batch's dispatches (101,000 comparisons for 750 steps).
SELECT st.saga_id, st.effect_id, st.sequence, st.state, o.result, o.succeeded_order,
       o.state AS dispatch_state, o.uncertain_attempt IS NOT NULL AS uncertain,
       c.state AS compensation_state
FROM effectus_saga_steps st
LEFT JOIN LATERAL (
    SELECT f.state, f.uncertain_attempt, f.result, f.succeeded_order
    FROM effectus_saga_outbox f
    WHERE f.saga_id = st.saga_id AND f.effect_id = st.effect_id AND f.direction = 'forward'
    LIMIT 1
) o ON true
LEFT JOIN LATERAL (
    SELECT u.state
    FROM effectus_saga_outbox u
    WHERE u.saga_id = st.saga_id AND u.effect_id = st.effect_id
      AND u.direction = 'compensation'
    LIMIT 1
) c ON true
WHERE st.saga_id = ANY (ARRAY(SELECT unnest(%(saga_ids)s::text[])))
