SELECT a.dispatch_id, a.attempt, a.request_id, a.lease_owner, a.claimed_at, a.lease_expires_at,
       a.grants, a.fencing_status, a.sent_at, a.outcome, a.settled_by, a.status_code, a.error,
       a.evidence, a.completed_at, a.late, a.late_outcome, a.late_status_code, a.late_error,
       a.late_at
FROM effectus_saga_attempts a
JOIN effectus_saga_outbox o ON o.dispatch_id = a.dispatch_id
WHERE o.saga_id = %(saga_id)s
ORDER BY a.dispatch_id, a.attempt
