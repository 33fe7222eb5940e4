-- Every operator action starts here: the saga row first (then its dispatches, in dispatch_id
-- order), the order outcome recording uses. A second operator, or the recorder, waits here and
-- then sees what the first one committed. FOR NO KEY UPDATE excludes both (they take FOR NO
-- KEY UPDATE / FOR UPDATE) but not the FOR KEY SHARE a claim takes when it appends a timeline
-- row: a claim holding this saga's queued dispatch can finish instead of deadlocking with us.
SELECT saga_id, namespace, execution_id, plan_id, plan_digest, plan, facts, state, stop_reason,
       cancel_requested_at, cancel_requested_by,
       cancel_requested_at IS NOT NULL AS cancel_requested
FROM effectus_saga_instances
WHERE saga_id = %(saga_id)s
FOR NO KEY UPDATE
