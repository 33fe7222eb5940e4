-- settled_to, settled_actor: the settlement's timeline entry (attempt_settled), when the
-- attempt row carries it (effectusd/core/timeline.py), else NULL (the event is stored); it
-- goes after the saga's last stored event (settled_after), which this transaction's own
-- events, inserted after this statement, follow. settled_step: the step move the settlement
-- makes (its step's state after), when the row carries that entry too, else NULL; settled_saga:
-- the saga's completion, when the row carries that entry too (after the step move).
UPDATE effectus_saga_attempts
SET outcome = :outcome, settled_by = :settled_by, status_code = :status_code,
    error = :error, evidence = :evidence,
    fencing_status = coalesce(:fencing_status, fencing_status),
    completed_at = ((julianday('now') - 2440587.5) * 86400.0),
    settled_to = :settled_to, settled_actor = :settled_actor, settled_step = :settled_step,
    settled_saga = :settled_saga,
    settled_after = CASE WHEN :settled_to IS NOT NULL THEN
        coalesce((SELECT max(e.event_id) FROM effectus_saga_events e
                  WHERE e.saga_id = :saga_id), 0) END
WHERE dispatch_id = :dispatch_id AND attempt = :attempt AND outcome IS NULL
