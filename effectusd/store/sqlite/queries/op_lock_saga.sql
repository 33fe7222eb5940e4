-- Every operator action starts here: the saga row, then its dispatches in dispatch_id order.
-- No row locks: the action's transaction holds SQLite's write lock from its start (BEGIN
-- IMMEDIATE), so a second operator, or the recorder, waits for it and then sees what it
-- committed.
SELECT saga_id, namespace, execution_id, plan_id, plan_digest, plan, facts, state, stop_reason,
       cancel_requested_at, cancel_requested_by,
       cancel_requested_at IS NOT NULL AS "cancel_requested [boolean]"
FROM effectus_saga_instances
WHERE saga_id = :saga_id
