-- Take due probes (effectus_dispatch_probes_due): SKIP LOCKED so two daemons never take one,
-- and each taken row's next probe moves on by its verb's `every` (:verbs, :every_s) in the
-- same statement, so nobody takes it again while this one is asked. Returns the database
-- time of the take: the probe is sent after it.
WITH due AS (
    SELECT p.dispatch_id, p.attempt
    FROM effectus_dispatch_probes p
    WHERE p.next_probe_at IS NOT NULL AND p.next_probe_at <= now()
    ORDER BY p.next_probe_at
    LIMIT %(limit)s
    FOR UPDATE OF p SKIP LOCKED
)
UPDATE effectus_dispatch_probes p
SET probes = p.probes + 1,
    next_probe_at = now() + make_interval(secs => coalesce(
        (SELECT e.every_s FROM effectus_saga_outbox o
         JOIN unnest(%(verbs)s::text[], %(every_s)s::float8[]) AS e (verb, every_s)
           ON e.verb = o.verb
         WHERE o.dispatch_id = p.dispatch_id), 60)),
    updated_at = now()
FROM due
WHERE p.dispatch_id = due.dispatch_id AND p.attempt = due.attempt
RETURNING p.dispatch_id, p.attempt, p.probes, now() AS db_now
