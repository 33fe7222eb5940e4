-- The sagas of the dispatches an outcome batch settles, in id order. No row locks: the
-- recorder's transaction holds SQLite's write lock from its start (BEGIN IMMEDIATE).
SELECT s.saga_id, s.namespace, s.execution_id, s.state, s.plan_digest, s.facts,
       -- The recorder keeps checked plans by digest: a plan it has is neither sent nor parsed.
       CASE WHEN s.plan_digest IN (SELECT value FROM json_each(:known_plans)) THEN NULL
            ELSE s.plan END AS "plan [json_text]",
       s.cancel_requested_at IS NOT NULL AS "cancel_requested [boolean]",
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
WHERE s.saga_id IN (
    SELECT saga_id FROM effectus_saga_outbox
    WHERE dispatch_id IN (SELECT value FROM json_each(:dispatch_ids))
)
ORDER BY s.saga_id
