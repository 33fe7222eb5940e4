-- settled_to, settled_actor: the settlement's timeline entry (attempt_settled), when the
-- attempt row carries it (effectusd/core/timeline.py), else NULL (the event is stored); it
-- goes after the saga's last stored event (settled_after), which this transaction's own
-- events, inserted after this statement, follow. settled_step: the step move the settlement
-- makes (its step's state after), when the row carries that entry too, else NULL; settled_saga:
-- the saga's completion, when the row carries that entry too (after the step move).
UPDATE effectus_saga_attempts
SET outcome = %(outcome)s, settled_by = %(settled_by)s, status_code = %(status_code)s,
    error = %(error)s, evidence = %(evidence)s::jsonb,
    fencing_status = coalesce(%(fencing_status)s, fencing_status),
    completed_at = clock_timestamp(),
    settled_to = %(settled_to)s, settled_actor = %(settled_actor)s,
    settled_step = %(settled_step)s, settled_saga = %(settled_saga)s,
    settled_after = CASE WHEN %(settled_to)s::text IS NOT NULL THEN
        coalesce((SELECT max(e.event_id) FROM effectus_saga_events e
                  WHERE e.saga_id = %(saga_id)s), 0) END
WHERE dispatch_id = %(dispatch_id)s AND attempt = %(attempt)s AND outcome IS NULL
