-- What --until-idle waits for: work that is live now or due soon.
SELECT count(*) FILTER (WHERE state = 'in_flight') AS in_flight,
       count(*) FILTER (WHERE state IN ('queued', 'retry_wait')
                        AND next_attempt_at
                            <= ((julianday('now') - 2440587.5) * 86400.0) + :horizon_s)
           AS due_soon
FROM effectus_saga_outbox
WHERE state IN ('queued', 'retry_wait', 'in_flight')
