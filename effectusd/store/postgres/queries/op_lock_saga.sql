-- Every operator action starts here: the saga row first (then its dispatches, in dispatch_id
-- order), the order outcome recording uses. A second operator, or the recorder, waits here and
-- then sees what the first one committed. FOR NO KEY UPDATE excludes both (they take FOR NO
-- KEY UPDATE / FOR UPDATE) but not the FOR KEY SHARE a claim takes when it appends a timeline
-- row: a claim holding this saga's queued dispatch can finish instead of deadlocking with us.
SELECT saga_id, namespace, execution_id, plan_id, plan_digest, plan, facts, state, stop_reason,
       cancel_requested_at, cancel_requested_by,
       cancel_requested_at IS NOT NULL AS cancel_requested,
       -- Why compensation began (the latest move into compensating): a blocked saga that
       -- resumes compensating gets it back as its stop reason, instead of the block's.
       CASE WHEN s.state IN (
           'blocked_unknown', 'blocked_fence', 'blocked_compensation', 'blocked_contract'
       ) THEN (
           SELECT e.detail->>'reason' FROM effectus_saga_events e
           WHERE e.saga_id = s.saga_id AND e.kind = 'saga_state'
             AND e.to_state = 'compensating' AND e.detail ? 'reason'
           ORDER BY e.event_id DESC LIMIT 1
       ) END AS compensation_reason
FROM effectus_saga_instances s
WHERE saga_id = %(saga_id)s
FOR NO KEY UPDATE
