-- Outcome recording locks sagas first (in id order), then their dispatches: the same order
-- operator actions use, so the two never deadlock. NO KEY UPDATE: the saga's key never
-- changes, and a claim's event insert (a foreign-key share lock) must not wait on us.
SELECT s.saga_id, s.namespace, s.execution_id, s.state, s.plan_digest, s.facts,
       -- The recorder keeps checked plans by digest: a plan it has is neither sent nor parsed.
       CASE WHEN s.plan_digest = ANY(%(known_plans)s::text[]) THEN NULL ELSE s.plan END AS plan,
       s.cancel_requested_at IS NOT NULL AS cancel_requested,
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
WHERE s.saga_id IN (
    SELECT saga_id FROM effectus_saga_outbox WHERE dispatch_id = ANY(%(dispatch_ids)s::bigint[])
)
ORDER BY s.saga_id
FOR NO KEY UPDATE OF s
