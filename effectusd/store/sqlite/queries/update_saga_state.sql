-- A saga that runs again (unblocked) has no stop reason; compensated keeps the reason
-- compensation began.
UPDATE effectus_saga_instances
SET state = :state,
    stop_reason = CASE WHEN :state = 'running' THEN NULL
                       ELSE coalesce(:stop_reason, stop_reason) END,
    finished_at = CASE WHEN :state IN ('completed', 'compensated', 'failed')
                       THEN ((julianday('now') - 2440587.5) * 86400.0) END,
    revision = revision + 1,
    updated_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE saga_id = :saga_id
