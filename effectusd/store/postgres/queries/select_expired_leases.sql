-- In-flight rows whose lease ran out: their holder died or stalled. Locked so one reclaimer
-- settles each; whether the attempt was marked sent decides what may have happened.
SELECT o.dispatch_id, o.attempt, o.lease_token, o.lease_owner, a.sent_at
FROM effectus_saga_outbox o
JOIN effectus_saga_attempts a ON a.dispatch_id = o.dispatch_id AND a.attempt = o.attempt
WHERE o.state = 'in_flight' AND o.lease_expires_at < now()
ORDER BY o.lease_expires_at
LIMIT %(limit)s
FOR UPDATE OF o SKIP LOCKED
