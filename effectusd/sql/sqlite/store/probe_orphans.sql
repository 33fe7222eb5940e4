-- The probes of dispatches whose verb has no probe in this daemon's configuration, due for
-- :grace_s and more (see PostgreSQL's), under the write lock, with their dispatch as it is now.
SELECT p.dispatch_id, p.attempt, p.probes, o.saga_id, o.effect_id, o.direction, o.verb,
       (o.state = 'blocked_unknown' AND o.attempt = p.attempt) AS "blocked [boolean]"
FROM effectus_dispatch_probes p
JOIN effectus_saga_outbox o ON o.dispatch_id = p.dispatch_id
WHERE p.next_probe_at IS NOT NULL
  AND p.next_probe_at <= ((julianday('now') - 2440587.5) * 86400.0) - :grace_s
  AND o.verb NOT IN (SELECT value FROM json_each(:verbs))
ORDER BY p.next_probe_at
LIMIT coalesce(:limit, -1)
