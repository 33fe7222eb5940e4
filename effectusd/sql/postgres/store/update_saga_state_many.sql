-- update_saga_state for a whole batch (a JSON array of rows, one object per saga).
UPDATE effectus_saga_instances s
SET state = r.state,
    stop_reason = CASE WHEN r.state = 'running' THEN NULL
                       WHEN r.state = 'completed' THEN r.stop_reason
                       ELSE coalesce(r.stop_reason, s.stop_reason) END,
    finished_at = CASE WHEN r.state IN ('completed', 'compensated', 'failed') THEN now() END,
    revision = s.revision + 1,
    updated_at = now()
FROM json_to_recordset(%(rows)s::json) AS r(
        saga_id text, state text, stop_reason text
     )
WHERE s.saga_id = r.saga_id
RETURNING pg_notify('effectus_saga', s.saga_id)  -- delivered at commit: wakes Client.wait
