-- A saga that runs again (unblocked) has no stop reason; a completed one only the reason it
-- was given (an operator's resolution), never an earlier block's; compensated keeps the
-- reason compensation began.
UPDATE effectus_saga_instances
SET state = :state,
    stop_reason = CASE WHEN :state = 'running' THEN NULL
                       WHEN :state = 'completed' THEN :stop_reason
                       ELSE coalesce(:stop_reason, stop_reason) END,
    finished_at = CASE WHEN :state IN ('completed', 'compensated', 'failed')
                       THEN ((julianday('now') - 2440587.5) * 86400.0) END,
    revision = revision + 1,
    updated_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE saga_id = :saga_id
