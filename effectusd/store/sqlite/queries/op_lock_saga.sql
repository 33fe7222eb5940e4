-- Every operator action starts here: the saga row, then its dispatches in dispatch_id order.
-- No row locks: the action's transaction holds SQLite's write lock from its start (BEGIN
-- IMMEDIATE), so a second operator, or the recorder, waits for it and then sees what it
-- committed.
SELECT saga_id, namespace, execution_id, plan_id, plan_digest, plan, facts, state, stop_reason,
       cancel_requested_at, cancel_requested_by,
       cancel_requested_at IS NOT NULL AS "cancel_requested [boolean]",
       -- Why compensation began (the latest move into compensating): a blocked saga that
       -- resumes compensating gets it back as its stop reason, instead of the block's.
       -- json_type is NULL only when the key is absent; ->> gives its text.
       CASE WHEN s.state IN (
           'blocked_unknown', 'blocked_fence', 'blocked_compensation', 'blocked_contract'
       ) THEN (
           SELECT e.detail ->> '$.reason' FROM effectus_saga_events e
           WHERE e.saga_id = s.saga_id AND e.kind = 'saga_state'
             AND e.to_state = 'compensating' AND json_type(e.detail, '$.reason') IS NOT NULL
           ORDER BY e.event_id DESC LIMIT 1
       ) END AS compensation_reason
FROM effectus_saga_instances s
WHERE saga_id = :saga_id
