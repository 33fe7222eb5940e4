-- A saga that runs again (unblocked) has no stop reason; a completed one only the reason it
-- was given (an operator's resolution), never an earlier block's; compensated keeps the
-- reason compensation began.
UPDATE effectus_saga_instances
SET state = %(state)s,
    stop_reason = CASE WHEN %(state)s = 'running' THEN NULL
                       WHEN %(state)s = 'completed' THEN %(stop_reason)s
                       ELSE coalesce(%(stop_reason)s, stop_reason) END,
    finished_at = CASE WHEN %(state)s IN ('completed', 'compensated', 'failed') THEN now() END,
    revision = revision + 1,
    updated_at = now()
WHERE saga_id = %(saga_id)s
RETURNING pg_notify('effectus_saga', saga_id)  -- delivered at commit: wakes Client.wait
