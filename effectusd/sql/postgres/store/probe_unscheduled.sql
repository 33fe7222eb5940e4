-- Blocked dispatches of the verbs that have a probe, whose latest attempt has no probe row yet
-- (effectus_saga_outbox_blocked_unknown): the probe loop schedules them. The latest attempt's
-- lease end is its deadline: at or after the X-Effectus-Deadline any attempt under the key sent.
SELECT o.dispatch_id, o.attempt, o.saga_id, o.effect_id, o.direction, o.verb,
       a.lease_expires_at AS deadline
FROM effectus_saga_outbox o
-- The attempt by its key (LIMIT 1 keeps it a per-row index probe): joined instead, a small or
-- unanalyzed attempts table may be read whole and hashed.
CROSS JOIN LATERAL (
    SELECT t.lease_expires_at FROM effectus_saga_attempts t
    WHERE t.dispatch_id = o.dispatch_id AND t.attempt = o.attempt
    LIMIT 1
) a
WHERE o.state = 'blocked_unknown' AND o.verb = ANY(%(verbs)s::text[])
  AND NOT EXISTS (
      SELECT 1 FROM effectus_dispatch_probes p
      WHERE p.dispatch_id = o.dispatch_id AND p.attempt = o.attempt
  )
ORDER BY o.dispatch_id
LIMIT %(limit)s
