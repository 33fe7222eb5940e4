-- Has the saga's first request been written ahead (sent)?
SELECT 1
FROM effectus_saga_attempts a
JOIN effectus_saga_outbox o USING (dispatch_id)
WHERE o.saga_id = %(saga_id)s AND a.sent_at IS NOT NULL
