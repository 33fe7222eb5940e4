-- New dispatches born leased to the daemon recording the outcome that enqueued them (a JSON
-- array of rows, as insert_dispatch_many takes, with the live call timeout and retry budget
-- already applied): in the record transaction, for a destination where that daemon has a
-- free slot, the next step is claimed where it is written. The row is inserted in_flight,
-- attempt 1, with its lease and attempt row, exactly as claim_ready.sql would leave it, so
-- nothing downstream can tell the two apart (an unfenced one is also written ahead, as the
-- claim loop's claim writes it); it skips the claim's second version of the row and its
-- round trip. Its claim's timeline entry is its attempt row, as a claim's is, and its
-- enqueue's is the row itself (enqueued_by, as insert_dispatch.sql writes it;
-- effectusd/core/timeline.py). The claim is made when the row is written: its claimed_at is
-- the row's created_at, not the transaction's start (now()), which would put the claim on
-- the timeline before the settlement and enqueue written earlier in this transaction.
-- Delivered to no one else: no NOTIFY.
WITH d AS (
    SELECT *
    FROM json_to_recordset(%(rows)s::json) AS d(
            saga_id text, effect_id text, direction text, namespace text,
            execution_id text, destination text, verb text, contract_hash text,
            delivery text, method text, path text, args_canonical text, args_hash text,
            idempotency_key text, fencing_resources text, timeout_ms int, max_attempts int,
            enqueued_by text, started_from text, enqueued_after bigint
         )
),
claimed AS (
    INSERT INTO effectus_saga_outbox
        (saga_id, effect_id, direction, namespace, execution_id, destination, verb,
         contract_hash, delivery, method, path, args_canonical, args_hash, idempotency_key,
         fencing_resources, timeout_ms, max_attempts, next_attempt_at, created_at,
         state, attempt, lease_owner, lease_token, lease_expires_at, enqueued_by, started_from,
         enqueued_after, budget_since)
    SELECT saga_id, effect_id, direction, namespace, execution_id, destination, verb,
           contract_hash, delivery, method, path, args_canonical, args_hash, idempotency_key,
           fencing_resources::jsonb, timeout_ms, max_attempts, now(), clock_timestamp(),
           'in_flight', 1, %(owner)s, gen_random_uuid(),
           now() + make_interval(secs => timeout_ms / 1000.0 + %(margin_s)s), enqueued_by,
           started_from, enqueued_after, now()
    FROM d
    RETURNING dispatch_id, saga_id, effect_id, direction, execution_id, destination, verb,
              contract_hash, delivery, method, path, args_canonical, args_hash,
              idempotency_key, fencing_resources, timeout_ms, max_attempts, fence_waits,
              unsent, uncertain_attempt, attempt, false AS fence_waiting, lease_token::text AS lease_token, lease_expires_at, created_at,
              fencing_resources = '[]'::jsonb AS written_ahead
),
-- An unfenced row is written ahead where it is born, as claim_ready.sql does for the claim
-- loop: its attempt row says "may have been sent" from the commit of this transaction (which
-- is synchronous) and the daemon calls it with no write-ahead statement. A fenced row takes
-- its tokens in its own write-ahead (write_ahead.sql).
opened AS (
    INSERT INTO effectus_saga_attempts
        (dispatch_id, attempt, request_id, lease_owner, lease_token, lease_expires_at,
         claimed_at, sent_at, grants, fencing_status)
    SELECT dispatch_id, attempt, gen_random_uuid(), %(owner)s, lease_token::uuid,
           lease_expires_at, created_at,
           CASE WHEN written_ahead THEN clock_timestamp() END,
           CASE WHEN written_ahead THEN '[]'::jsonb END,
           CASE WHEN written_ahead THEN 'not_requested' END
    FROM claimed
    RETURNING dispatch_id, request_id::text AS request_id
)
SELECT c.*, opened.request_id, now() AS db_now
FROM claimed c
JOIN opened USING (dispatch_id)
