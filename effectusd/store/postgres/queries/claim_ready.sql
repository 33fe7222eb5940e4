-- Claim due rows for destinations with free capacity, within the overall room, in one
-- statement: lease each row (attempt + 1, random token, deadline from the database clock)
-- and open its attempt row, which is also the claim's timeline entry: the timeline read derives
-- "dispatch_claimed" from it (effectusd.core.timeline), nothing goes to effectus_saga_events.
-- Only rows in the partial "ready" index are ever looked at. The call timeout and the retry
-- budget come from the loaded config (live), not from the row written at enqueue: the row is
-- brought up to date here, so it shows what this attempt used.
WITH unsynced AS (
    -- The claim's commit does not wait for its WAL to reach disk (this transaction only: the
    -- setting ends with it). A claim lost in a server crash is as if never made: its rows are
    -- due again and nothing was sent, because a call starts only after its write-ahead has
    -- committed, synchronously, and WAL is flushed in order: a durable write-ahead means a
    -- durable claim. The write-ahead and the recorder keep synchronous commits.
    SELECT set_config('synchronous_commit', 'off', true) AS setting
),
wanted AS (
    SELECT destination, lim
    FROM unnest(%(destinations)s::text[], %(limits)s::int[]) AS w(destination, lim)
    CROSS JOIN unsynced
),
live AS (
    SELECT verb, timeout_ms, max_attempts
    FROM unnest(%(verbs)s::text[], %(timeouts_ms)s::int[], %(max_attempts)s::int[])
        AS l(verb, timeout_ms, max_attempts)
),
candidates AS (
    SELECT picked.dispatch_id, picked.next_attempt_at,
           live.timeout_ms AS live_timeout_ms, live.max_attempts AS live_max_attempts,
           row_number() OVER (PARTITION BY wanted.destination
                              ORDER BY picked.next_attempt_at) AS turn
    FROM wanted
    CROSS JOIN LATERAL (
        SELECT o.dispatch_id, o.next_attempt_at, o.verb
        FROM effectus_saga_outbox o
        WHERE o.state IN ('queued', 'retry_wait')
          AND o.destination = wanted.destination
          AND o.next_attempt_at <= now()
        ORDER BY o.next_attempt_at
        LIMIT wanted.lim
        FOR UPDATE SKIP LOCKED
    ) AS picked
    LEFT JOIN live ON live.verb = picked.verb
),
-- The overall room is dealt out in turns: every destination with due rows gets its first row
-- before any gets its second, so idle destinations hold nothing and none is starved. Rows
-- looked at but not dealt stay locked only until this statement ends.
due AS (
    SELECT dispatch_id, live_timeout_ms, live_max_attempts
    FROM candidates
    ORDER BY turn, next_attempt_at
    LIMIT %(total)s
),
claimed AS (
    UPDATE effectus_saga_outbox o
    SET state = 'in_flight',
        attempt = o.attempt + 1,
        lease_owner = %(owner)s,
        lease_token = gen_random_uuid(),
        timeout_ms = coalesce(due.live_timeout_ms, o.timeout_ms),
        max_attempts = coalesce(o.budget_base + due.live_max_attempts, o.max_attempts),
        lease_expires_at = now() + make_interval(
            secs => coalesce(due.live_timeout_ms, o.timeout_ms) / 1000.0 + %(margin_s)s),
        updated_at = now()
    FROM due
    -- The array lets the planner look the few claimed rows up by primary key: joined to the
    -- CTE alone it guesses "a share of every ready row" and scans the whole outbox per claim
    -- (0.9 s per claim over a million ready rows; a few ms with this).
    WHERE o.dispatch_id = due.dispatch_id
      AND o.dispatch_id = ANY (ARRAY(SELECT dispatch_id FROM due))
    RETURNING o.dispatch_id, o.saga_id, o.effect_id, o.direction, o.execution_id, o.destination,
              o.verb, o.contract_hash, o.delivery, o.method, o.path, o.args_canonical,
              o.args_hash, o.idempotency_key, o.fencing_resources, o.timeout_ms, o.max_attempts,
              o.fence_waits, o.attempt,
              o.lease_token, o.lease_expires_at, o.created_at
),
opened AS (
    INSERT INTO effectus_saga_attempts
        (dispatch_id, attempt, request_id, lease_owner, lease_token, lease_expires_at)
    SELECT dispatch_id, attempt, gen_random_uuid(), %(owner)s, lease_token, lease_expires_at
    FROM claimed
    RETURNING dispatch_id, request_id
)
SELECT c.*, opened.request_id, now() AS db_now
FROM claimed c
JOIN opened USING (dispatch_id)
