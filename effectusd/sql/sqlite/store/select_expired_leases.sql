-- In-flight rows whose lease ran out: their holder died or stalled. The recorder then settles
-- each only if its guard still holds, in the same write transaction.
SELECT o.dispatch_id, o.attempt, o.lease_token, o.lease_owner, a.sent_at
FROM effectus_saga_outbox o
JOIN effectus_saga_attempts a ON a.dispatch_id = o.dispatch_id AND a.attempt = o.attempt
WHERE o.state = 'in_flight'
  AND o.lease_expires_at < ((julianday('now') - 2440587.5) * 86400.0)
ORDER BY o.lease_expires_at
LIMIT coalesce(:limit, -1)
