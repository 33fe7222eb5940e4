-- In-flight rows whose lease ran out: their holder died or stalled. Read without locking:
-- the recorder then locks saga, then dispatch (the one lock order everyone uses) and settles
-- each only if its guard still holds, so two reclaimers never settle one attempt twice.
SELECT o.dispatch_id, o.attempt, o.lease_token, o.lease_owner, a.sent_at
FROM effectus_saga_outbox o
JOIN effectus_saga_attempts a ON a.dispatch_id = o.dispatch_id AND a.attempt = o.attempt
WHERE o.state = 'in_flight' AND o.lease_expires_at < now()
ORDER BY o.lease_expires_at
LIMIT %(limit)s
