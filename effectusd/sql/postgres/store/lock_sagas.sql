-- Every settlement starts here, the recorder's (the sagas of the dispatches it settles) and
-- every operator action's (one saga): saga rows first, in id order, then their dispatches, so
-- the two never deadlock. A second operator, or the recorder, waits here and then sees what the
-- first committed. NO KEY UPDATE: the saga's key never changes, and a claim's event insert (a
-- foreign-key share lock) must not wait on us, nor we on it.
SELECT s.saga_id, s.namespace, s.execution_id, s.plan_id, s.state, s.stop_reason,
       s.plan_digest, s.facts, s.cancel_requested_at, s.cancel_requested_by,
       -- The recorder keeps checked plans by digest: a plan it has is neither sent nor parsed.
       CASE WHEN s.plan_digest = ANY(%(known_plans)s::text[]) THEN NULL ELSE s.plan END AS plan,
       s.cancel_requested_at IS NOT NULL AS cancel_requested,
       -- Why compensation began (the latest move into compensating): a blocked saga that
       -- resumes compensating gets it back as its stop reason, instead of the block's.
       -- Every blocked state (from SagaState: store.operations.BLOCKED_STATES).
       CASE WHEN s.state = ANY(%(blocked_states)s::text[]) THEN (
           SELECT e.detail->>'reason' FROM effectus_saga_events e
           WHERE e.saga_id = s.saga_id AND e.kind = 'saga_state'
             AND e.to_state = 'compensating' AND e.detail ? 'reason'
           ORDER BY e.event_id DESC LIMIT 1
       ) END AS compensation_reason
FROM effectus_saga_instances s
-- One list or the other (the other empty); a UNION keeps both primary-key lookups. The ids
-- are taken once, as an array, before any row is locked: a row this waits for is then re-checked
-- against the same ids. Joined to them instead, a saga whose row another writer changed
-- meanwhile could drop out of the result on that re-check (with a nested loop over the ids).
WHERE s.saga_id = ANY (ARRAY(
    SELECT unnest(%(saga_ids)s::text[])
    UNION ALL
    SELECT saga_id FROM effectus_saga_outbox WHERE dispatch_id = ANY(%(dispatch_ids)s::bigint[])
))
ORDER BY s.saga_id
FOR NO KEY UPDATE OF s
