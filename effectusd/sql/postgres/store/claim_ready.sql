-- Claim due rows for destinations with free capacity, within the overall room, in one
-- statement: lease each row (attempt + 1, random token, deadline from the database clock)
-- and open its attempt row, which is also the claim's timeline entry: the timeline read derives
-- "dispatch_claimed" from it (effectusd.core.timeline), nothing goes to effectus_saga_events.
-- Only rows in the partial "ready" index are ever looked at. The call timeout and the retry
-- budget come from the loaded config (live), not from the row written at enqueue: the row is
-- brought up to date here, so it shows what this attempt used.
WITH wanted AS (
    SELECT destination, lim
    FROM unnest(%(destinations)s::text[], %(limits)s::int[]) AS w(destination, lim)
),
live AS (
    SELECT verb, timeout_ms, max_attempts, contract_hash, legacy_hash
    FROM unnest(%(verbs)s::text[], %(timeouts_ms)s::int[], %(max_attempts)s::int[],
                %(contract_hashes)s::text[], %(legacy_hashes)s::text[])
        AS l(verb, timeout_ms, max_attempts, contract_hash, legacy_hash)
),
candidates AS (
    SELECT picked.dispatch_id, picked.next_attempt_at,
           live.timeout_ms AS live_timeout_ms, live.max_attempts AS live_max_attempts,
           live.contract_hash AS live_contract_hash, live.legacy_hash AS live_legacy_hash,
           row_number() OVER (PARTITION BY wanted.destination
                              ORDER BY picked.next_attempt_at) AS turn
    FROM wanted
    CROSS JOIN LATERAL (
        SELECT o.dispatch_id, o.next_attempt_at, o.verb
        FROM effectus_saga_outbox o
        WHERE o.state IN ('queued', 'retry_wait')
          AND o.destination = wanted.destination
          AND o.next_attempt_at <= now()
          -- a daemon serving several stores claims its namespace's rows in each (NULL: every
          -- row, the one store's daemon): a filter on the ready index's rows, never a scan of
          -- its own. A CASE, whose selectivity the planner does not guess: planned generically
          -- before ANALYZE, a plain test of namespace looked selective, and the planner sorted
          -- every ready row of the destination instead of reading the index in order.
          AND CASE WHEN %(namespace)s::text IS NULL OR o.namespace = %(namespace)s::text
                   THEN true ELSE false END
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
    SELECT dispatch_id, live_timeout_ms, live_max_attempts, live_contract_hash, live_legacy_hash
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
        -- the time budget of calls never sent or known not committed runs from the first claim
        budget_since = coalesce(o.budget_since, now()),
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
              o.fence_waits, o.unsent, o.uncertain_attempt, o.attempt,
              o.fence_wait_since IS NOT NULL AS fence_waiting,
              -- the lease token and the request id as text: the daemon holds them as str
              o.lease_token::text AS lease_token, o.lease_expires_at, o.created_at,
              -- written ahead here: wanted, unfenced, pinned by the live contract of its verb
              -- (else it is settled unsent: contract drift) and within its retry budget (the
              -- requests written, claims that ended unsent aside, bound only the re-sending of
              -- an uncertain attempt: Claim.budget_spent)
              (%(write_ahead)s::boolean AND o.fencing_resources = '[]'::jsonb
               AND o.contract_hash IN (due.live_contract_hash, due.live_legacy_hash)
               AND (o.max_attempts IS NULL OR o.uncertain_attempt IS NULL
                    OR o.attempt - o.unsent <= o.max_attempts))
                  IS TRUE AS written_ahead
),
-- With write_ahead (the daemon's claim loop), a row the daemon will call as it is (unfenced,
-- its contract pinned, within its budget: "written_ahead" above) is written ahead here too: its
-- attempt row is born "may have been sent" (sent_at, no grants, fencing not requested), as
-- write_ahead.sql would mark it, and the daemon calls it with no second statement. A fenced
-- row takes its fencing tokens in its own write-ahead; the others are settled unsent by the
-- daemon (Pipeline.dispatch_batch). The lease taken in this statement cannot be lost before
-- it commits, so write_ahead.sql's guard holds trivially.
opened AS (
    INSERT INTO effectus_saga_attempts
        (dispatch_id, attempt, request_id, lease_owner, lease_token, lease_expires_at,
         sent_at, grants, fencing_status)
    SELECT dispatch_id, attempt, gen_random_uuid(), %(owner)s, lease_token::uuid,
           lease_expires_at,
           CASE WHEN written_ahead THEN clock_timestamp() END,
           CASE WHEN written_ahead THEN '[]'::jsonb END,
           CASE WHEN written_ahead THEN 'not_requested' END
    FROM claimed
    RETURNING dispatch_id, request_id::text AS request_id
),
-- The claim's commit does not wait for its WAL to reach the disk when it wrote nothing ahead
-- (this transaction only: the setting ends with it). A claim lost in a server crash is as if
-- never made: its rows are due again and nothing was sent, because a call starts only after
-- its write-ahead has committed, synchronously, and WAL is flushed in order: a durable
-- write-ahead means a durable claim. A claim that wrote a row ahead is that row's write-ahead,
-- and commits synchronously. Only the setting at commit counts, after the whole statement; a
-- claim that found nothing locked nothing and has nothing to commit.
unsynced AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
    WHERE NOT EXISTS (SELECT 1 FROM claimed WHERE written_ahead)
)
SELECT c.*, opened.request_id, now() AS db_now
FROM claimed c
JOIN opened USING (dispatch_id)
LEFT JOIN unsynced ON true
