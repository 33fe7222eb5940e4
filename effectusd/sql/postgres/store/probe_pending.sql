-- What --until-idle asks of the probes of :verbs whose dispatch is still blocked on the probed
-- attempt: how many are due now, how many are scheduled later, and when the next of those is.
SELECT count(*) FILTER (WHERE p.next_probe_at <= now()) AS due,
       count(*) FILTER (WHERE p.next_probe_at > now()) AS later,
       min(p.next_probe_at) FILTER (WHERE p.next_probe_at > now()) AS next_at,
       now() AS db_now
FROM effectus_dispatch_probes p
JOIN effectus_saga_outbox o ON o.dispatch_id = p.dispatch_id AND o.attempt = p.attempt
WHERE p.next_probe_at IS NOT NULL AND o.state = 'blocked_unknown'
  AND o.verb = ANY(%(verbs)s::text[])
