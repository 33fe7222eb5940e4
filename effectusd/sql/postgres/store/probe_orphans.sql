-- The probes of dispatches whose verb has no probe in this daemon's configuration (:verbs: the
-- verbs that have one), due for :grace_s and more: its [verbs.NAME.probe] was removed, or the
-- verb (a daemon that has it takes a due probe within seconds: the grace spares the probes of
-- a rolling deploy that adds one). probe_take never takes them, so the loop closes them
-- (probe_update), at most :limit a round, each locked (SKIP LOCKED: two daemons never close one
-- twice). With its dispatch as it is now: one still blocked on the probed attempt is given up,
-- for a person to resolve; any other just closed.
SELECT p.dispatch_id, p.attempt, p.probes, o.saga_id, o.effect_id, o.direction, o.verb,
       o.state = 'blocked_unknown' AND o.attempt = p.attempt AS blocked
FROM effectus_dispatch_probes p
JOIN effectus_saga_outbox o ON o.dispatch_id = p.dispatch_id
WHERE p.next_probe_at IS NOT NULL
  AND p.next_probe_at <= now() - make_interval(secs => %(grace_s)s)
  AND o.verb <> ALL(%(verbs)s::text[])
ORDER BY p.next_probe_at
LIMIT %(limit)s
FOR UPDATE OF p SKIP LOCKED
