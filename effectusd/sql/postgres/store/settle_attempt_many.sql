-- settle_attempt for a whole batch in one statement: the rows travel as one JSON array, one
-- object per attempt (the runner turns the rows of an executemany into it). settled_to,
-- settled_actor, settled_after, settled_step and settled_saga: the settlement's timeline
-- entries, as in settle_attempt.sql.
WITH batch AS MATERIALIZED (
    SELECT *
    FROM json_to_recordset(%(rows)s::json) AS r(
            dispatch_id bigint, attempt int, outcome text, settled_by text,
            status_code int, error text, evidence text, fencing_status text,
            saga_id text, settled_to text, settled_actor text, settled_step text,
            settled_saga text
         )
),
-- Each attempt found by its primary key, one lookup per row (OFFSET 0 keeps the lookup
-- inside), then updated where it was found (a TID scan over the array of row addresses).
-- Joined to the attempts directly, or by address alone, the planner took a small or freshly
-- grown table for cheaper to scan whole than to look up a hundred times, and read every
-- attempt per batch: about half of this statement's time in a 3,000-saga drain. The caller
-- holds the lock of each attempt's dispatch row, which every writer of an attempt takes
-- first (write_ahead.sql), so the row found is the row updated.
found AS MATERIALIZED (
    SELECT x.tid, r.*
    FROM batch AS r
    CROSS JOIN LATERAL (
        SELECT a.ctid AS tid
        FROM effectus_saga_attempts a
        WHERE a.dispatch_id = r.dispatch_id AND a.attempt = r.attempt
        OFFSET 0
    ) AS x
)
UPDATE effectus_saga_attempts a
SET outcome = r.outcome, settled_by = r.settled_by, status_code = r.status_code,
    error = r.error, evidence = r.evidence::jsonb,
    fencing_status = coalesce(r.fencing_status, a.fencing_status),
    completed_at = clock_timestamp(),
    settled_to = r.settled_to, settled_actor = r.settled_actor, settled_step = r.settled_step,
    settled_saga = r.settled_saga,
    settled_after = CASE WHEN r.settled_to IS NOT NULL THEN
        coalesce((SELECT max(e.event_id) FROM effectus_saga_events e
                  WHERE e.saga_id = r.saga_id), 0) END
FROM found AS r
WHERE a.ctid = r.tid AND a.ctid = ANY (ARRAY(SELECT tid FROM found)) AND a.outcome IS NULL
