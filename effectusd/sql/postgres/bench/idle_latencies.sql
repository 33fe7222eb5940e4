-- The idle-latency sagas' enqueue -> request sent, in milliseconds.
SELECT extract(epoch FROM a.sent_at - o.created_at) * 1000 AS ms
FROM effectus_saga_attempts a
JOIN effectus_saga_outbox o USING (dispatch_id)
WHERE a.attempt = 1 AND a.sent_at IS NOT NULL AND o.execution_id LIKE 'idle-%%'
