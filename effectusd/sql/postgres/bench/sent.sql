-- Has the saga's first request been written ahead (sent)? Polled every few ms while the
-- daemon runs: the array makes it an index lookup (a join let the planner scan every
-- attempt on stale statistics, 4 ms of a shared core per poll).
SELECT 1
FROM effectus_saga_attempts a
WHERE a.dispatch_id = ANY (ARRAY(
        SELECT o.dispatch_id FROM effectus_saga_outbox o WHERE o.saga_id = %(saga_id)s))
  AND a.sent_at IS NOT NULL
