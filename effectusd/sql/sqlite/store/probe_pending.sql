-- What --until-idle asks of the probes of :verbs (see PostgreSQL's).
SELECT count(*) FILTER (WHERE p.next_probe_at <= ((julianday('now') - 2440587.5) * 86400.0))
           AS due,
       count(*) FILTER (WHERE p.next_probe_at > ((julianday('now') - 2440587.5) * 86400.0))
           AS later,
       min(p.next_probe_at) FILTER (
           WHERE p.next_probe_at > ((julianday('now') - 2440587.5) * 86400.0)
       ) AS "next_at [timestamp_real]",
       ((julianday('now') - 2440587.5) * 86400.0) AS "db_now [timestamp_real]"
FROM effectus_dispatch_probes p
JOIN effectus_saga_outbox o ON o.dispatch_id = p.dispatch_id AND o.attempt = p.attempt
WHERE p.next_probe_at IS NOT NULL AND o.state = 'blocked_unknown'
  AND o.verb IN (SELECT value FROM json_each(:verbs))
