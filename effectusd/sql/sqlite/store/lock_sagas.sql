-- Every settlement starts here, the recorder's (the sagas of the dispatches it settles) and
-- every operator action's (one saga), in id order. No row locks: the transaction holds
-- SQLite's write lock from its start (BEGIN IMMEDIATE), so a second operator, or the
-- recorder, waits for it and then sees what it committed.
SELECT s.saga_id, s.namespace, s.execution_id, s.plan_id, s.state, s.stop_reason,
       s.plan_digest, s.facts, s.cancel_requested_at, s.cancel_requested_by,
       -- The recorder keeps checked plans by digest: a plan it has is neither sent nor parsed.
       CASE WHEN s.plan_digest IN (SELECT value FROM json_each(:known_plans)) THEN NULL
            ELSE s.plan END AS "plan [json_text]",
       s.cancel_requested_at IS NOT NULL AS "cancel_requested [boolean]",
       -- Why compensation began (the latest move into compensating): a blocked saga that
       -- resumes compensating gets it back as its stop reason, instead of the block's.
       -- json_type is NULL only when the key is absent; ->> gives its text.
       -- Every blocked state (from SagaState: store.operations.BLOCKED_STATES).
       CASE WHEN s.state IN (SELECT value FROM json_each(:blocked_states)) THEN (
           SELECT e.detail ->> '$.reason' FROM effectus_saga_events e
           WHERE e.saga_id = s.saga_id AND e.kind = 'saga_state'
             AND e.to_state = 'compensating' AND json_type(e.detail, '$.reason') IS NOT NULL
           ORDER BY e.event_id DESC LIMIT 1
       ) END AS compensation_reason
FROM effectus_saga_instances s
-- One list or the other (the other empty).
WHERE s.saga_id IN (
    SELECT value FROM json_each(:saga_ids)
    UNION ALL
    SELECT saga_id FROM effectus_saga_outbox
    WHERE dispatch_id IN (SELECT value FROM json_each(:dispatch_ids))
)
ORDER BY s.saga_id
