-- Tracing only (never run while it is off): the submit's trace context of each claimed
-- dispatch's saga, read by primary key after the claim instead of inside it, so that the
-- claim costs nothing more when tracing is off.
SELECT saga_id, trace_context
FROM effectus_saga_instances
WHERE saga_id IN (SELECT value FROM json_each(:saga_ids))
  AND trace_context IS NOT NULL
