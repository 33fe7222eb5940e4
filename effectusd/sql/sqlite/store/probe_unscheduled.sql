-- Blocked dispatches of the verbs that have a probe, whose latest attempt has no probe row yet
-- (see PostgreSQL's): the probe loop schedules them.
SELECT o.dispatch_id, o.attempt, o.saga_id, o.effect_id, o.direction, o.verb,
       a.lease_expires_at AS "deadline [timestamp_real]"
FROM effectus_saga_outbox o
JOIN effectus_saga_attempts a ON a.dispatch_id = o.dispatch_id AND a.attempt = o.attempt
WHERE o.state = 'blocked_unknown' AND o.verb IN (SELECT value FROM json_each(:verbs))
  AND NOT EXISTS (
      SELECT 1 FROM effectus_dispatch_probes p
      WHERE p.dispatch_id = o.dispatch_id AND p.attempt = o.attempt
  )
ORDER BY o.dispatch_id
LIMIT coalesce(:limit, -1)
