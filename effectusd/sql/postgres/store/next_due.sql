-- Seconds until the earliest queued or retrying row becomes due (NULL: nothing waits): each
-- destination's first row in the ready index, in its order (one index probe per destination,
-- whatever the plan: a min() over `destination = ANY(...)` read every ready row of the
-- destinations when planned without the array's value, as the daemon plans it). Several
-- stores: this store's namespace alone (NULL: every row), as claim_ready.sql says.
SELECT extract(epoch FROM min(first.next_attempt_at) - now())::float8 AS seconds
FROM unnest(%(destinations)s::text[]) AS wanted(destination)
CROSS JOIN LATERAL (
    SELECT o.next_attempt_at
    FROM effectus_saga_outbox o
    WHERE o.state IN ('queued', 'retry_wait') AND o.destination = wanted.destination
      AND CASE WHEN %(namespace)s::text IS NULL OR o.namespace = %(namespace)s::text
               THEN true ELSE false END
    ORDER BY o.next_attempt_at
    LIMIT 1
) AS first
