-- Take due probes under the write lock (no second daemon can take one meanwhile); each taken
-- row's next probe moves on by its verb's `every` (:every, verb -> seconds). Returns the
-- database time of the take: the probe is sent after it.
UPDATE effectus_dispatch_probes
SET probes = probes + 1,
    next_probe_at = ((julianday('now') - 2440587.5) * 86400.0) + coalesce(
        (SELECT json_extract(:every, '$."' || o.verb || '"') FROM effectus_saga_outbox o
         WHERE o.dispatch_id = effectus_dispatch_probes.dispatch_id), 60),
    updated_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE (dispatch_id, attempt) IN (
    SELECT dispatch_id, attempt FROM effectus_dispatch_probes
    WHERE next_probe_at IS NOT NULL
      AND next_probe_at <= ((julianday('now') - 2440587.5) * 86400.0)
    ORDER BY next_probe_at
    LIMIT coalesce(:limit, -1)
)
RETURNING dispatch_id, attempt, probes,
          ((julianday('now') - 2440587.5) * 86400.0) AS "db_now [timestamp_real]"
