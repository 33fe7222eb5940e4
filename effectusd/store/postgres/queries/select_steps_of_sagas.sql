-- The steps of the sagas being settled, each with the state of its forward dispatch and
-- whether an attempt of it may have committed (one forward row per step): with parallel
-- steps the engine decides from its siblings' dispatches (docs/design.md section 4).
-- The steps are found by the batch's ids, taken once as an array, and each step's forward
-- dispatch by its unique key (LIMIT 1 keeps the lookup a per-step index probe): key lookups
-- whatever the statistics. Without statistics the planner otherwise either read every forward
-- dispatch (a literal list of ids looks like "every row") or, over a small outbox, joined each
-- step to all of the batch's dispatches (101,000 comparisons for 750 steps).
SELECT st.saga_id, st.effect_id, st.sequence, st.state, st.result, st.succeeded_order,
       o.state AS dispatch_state, o.uncertain_attempt IS NOT NULL AS uncertain
FROM effectus_saga_steps st
LEFT JOIN LATERAL (
    SELECT f.state, f.uncertain_attempt
    FROM effectus_saga_outbox f
    WHERE f.saga_id = st.saga_id AND f.effect_id = st.effect_id AND f.direction = 'forward'
    LIMIT 1
) o ON true
WHERE st.saga_id = ANY (ARRAY(SELECT unnest(%(saga_ids)s::text[])))
