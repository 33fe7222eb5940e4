-- Take the due probes of some verbs (:verbs, one destination's), at most :limit, under the
-- write lock (no second daemon can take one meanwhile). Counted and held as PostgreSQL's
-- (:plan, verb -> {"hold": seconds, "max": max_probes}); a row whose probes are all spent is
-- closed instead. Returns the database time of the take.
WITH due AS (
    SELECT p.dispatch_id, p.attempt,
           p.probes < json_extract(:plan, '$."' || o.verb || '".max') AS open,
           json_extract(:plan, '$."' || o.verb || '".hold') AS hold_s
    FROM effectus_dispatch_probes p
    JOIN effectus_saga_outbox o ON o.dispatch_id = p.dispatch_id
    WHERE p.next_probe_at IS NOT NULL
      AND p.next_probe_at <= ((julianday('now') - 2440587.5) * 86400.0)
      AND o.verb IN (SELECT value FROM json_each(:verbs))
    ORDER BY p.next_probe_at
    LIMIT coalesce(:limit, -1)
)
UPDATE effectus_dispatch_probes AS p
SET probes = CASE WHEN due.open THEN p.probes + 1 ELSE p.probes END,
    next_probe_at = CASE WHEN due.open
                         THEN ((julianday('now') - 2440587.5) * 86400.0) + due.hold_s END,
    updated_at = ((julianday('now') - 2440587.5) * 86400.0)
FROM due
WHERE p.dispatch_id = due.dispatch_id AND p.attempt = due.attempt
RETURNING dispatch_id, attempt, probes, next_probe_at,
          ((julianday('now') - 2440587.5) * 86400.0) AS "db_now [timestamp_real]"
