-- What --until-idle waits for: work that is live now or due soon (of this store's namespace
-- alone, for a daemon serving several stores; NULL: every row).
SELECT count(*) FILTER (WHERE state = 'in_flight') AS in_flight,
       count(*) FILTER (WHERE state IN ('queued', 'retry_wait')
                        AND next_attempt_at <= now() + make_interval(secs => %(horizon_s)s))
           AS due_soon
FROM effectus_saga_outbox
WHERE state IN ('queued', 'retry_wait', 'in_flight')
  AND CASE WHEN %(namespace)s::text IS NULL OR namespace = %(namespace)s::text
           THEN true ELSE false END
