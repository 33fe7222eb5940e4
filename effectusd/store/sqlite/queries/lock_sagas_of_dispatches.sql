-- The sagas of the dispatches an outcome batch settles, in id order. No row locks: the
-- recorder's transaction holds SQLite's write lock from its start (BEGIN IMMEDIATE).
SELECT s.saga_id, s.namespace, s.execution_id, s.state, s.plan_digest, s.plan, s.facts,
       s.cancel_requested_at IS NOT NULL AS "cancel_requested [boolean]"
FROM effectus_saga_instances s
WHERE s.saga_id IN (
    SELECT saga_id FROM effectus_saga_outbox
    WHERE dispatch_id IN (SELECT value FROM json_each(:dispatch_ids))
)
ORDER BY s.saga_id
