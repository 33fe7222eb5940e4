-- Take the due probes of some verbs (:verbs, one destination's), at most :limit (the probes it
-- has room for now); SKIP LOCKED so two daemons never take one. A probe counts toward its
-- verb's max_probes (:max_probes) when taken, and is held: not due again before :hold_s (the
-- destination's timeout plus the lease margin, or `every` if later) from now, so a probe in
-- flight, or lost with its daemon, is not sent again meanwhile. A due row whose probes are all
-- spent (the last one's answer was lost) is closed instead (its next_probe_at NULL): the
-- loop gives it up. Returns the database time of the take: the probe is sent after it.
WITH plan AS (
    SELECT *
    FROM unnest(%(verbs)s::text[], %(hold_s)s::float8[], %(max_probes)s::int[])
        AS e (verb, hold_s, max_probes)
), due AS (
    SELECT p.dispatch_id, p.attempt, p.probes < plan.max_probes AS open, plan.hold_s
    FROM effectus_dispatch_probes p
    JOIN effectus_saga_outbox o ON o.dispatch_id = p.dispatch_id
    JOIN plan ON plan.verb = o.verb
    WHERE p.next_probe_at IS NOT NULL AND p.next_probe_at <= now()
    ORDER BY p.next_probe_at
    LIMIT %(limit)s
    FOR UPDATE OF p SKIP LOCKED
)
UPDATE effectus_dispatch_probes p
SET probes = CASE WHEN due.open THEN p.probes + 1 ELSE p.probes END,
    next_probe_at = CASE WHEN due.open THEN now() + make_interval(secs => due.hold_s) END,
    updated_at = now()
FROM due
WHERE p.dispatch_id = due.dispatch_id AND p.attempt = due.attempt
RETURNING p.dispatch_id, p.attempt, p.probes, p.next_probe_at,
          now() AS db_now
