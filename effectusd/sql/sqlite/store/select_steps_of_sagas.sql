-- What the steps of the sagas being settled are read from (effectusd/store/rows.py
-- plan_steps): the steps are the saga's pinned plan's; each one's state is derived from its
-- dispatches' (effectusd/core/steps.py), and where it has none from its step row, which only
-- a step that failed at enqueue has (and every step of a saga submitted before migration
-- 10018). The forward dispatch also says whether an attempt may have committed, and carries
-- the result and order of the step's success (migration 10016). direction is NULL on a step
-- row.
SELECT o.saga_id, o.effect_id, o.direction, o.state,
       o.uncertain_attempt IS NOT NULL AS "uncertain [boolean]",
       o.result, o.succeeded_order
FROM effectus_saga_outbox o
WHERE o.saga_id IN (SELECT value FROM json_each(:saga_ids))
UNION ALL
SELECT st.saga_id, st.effect_id, NULL, st.state, 0, NULL, NULL
FROM effectus_saga_steps st
WHERE st.saga_id IN (SELECT value FROM json_each(:saga_ids))
