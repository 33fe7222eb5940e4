-- Lease the rows claim_due picked (attempt + 1, random token, deadline from the database
-- clock); returns what PostgreSQL's claimed CTE returns, and the database time of the claim.
-- The state guard makes a mark of a row that is no longer due a no-op. The call timeout and
-- the retry budget come from the loaded config (:live, verb -> [timeout_ms, max_attempts]),
-- not from the row written at enqueue: the row is brought up to date here. The time budget
-- of calls never sent or known not committed runs from the first claim (budget_since).
UPDATE effectus_saga_outbox
SET state = 'in_flight',
    attempt = attempt + 1,
    lease_owner = :owner,
    lease_token = lower(hex(randomblob(16))),
    timeout_ms = coalesce(json_extract(:live, '$."' || verb || '"[0]'), timeout_ms),
    max_attempts = coalesce(budget_base + json_extract(:live, '$."' || verb || '"[1]'),
                            max_attempts),
    budget_since = coalesce(budget_since, ((julianday('now') - 2440587.5) * 86400.0)),
    lease_expires_at = ((julianday('now') - 2440587.5) * 86400.0)
                       + coalesce(json_extract(:live, '$."' || verb || '"[0]'), timeout_ms)
                         / 1000.0 + :margin_s,
    updated_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE dispatch_id IN (SELECT value FROM json_each(:dispatch_ids))
  AND state IN ('queued', 'retry_wait')
RETURNING dispatch_id, saga_id, effect_id, direction, execution_id, destination, verb,
          contract_hash, delivery, method, path, args_canonical, args_hash, idempotency_key,
          fencing_resources, timeout_ms, max_attempts, fence_waits, unsent, uncertain_attempt,
          fence_wait_since IS NOT NULL AS "fence_waiting [boolean]", attempt, lease_token,
          lease_expires_at, created_at,
          ((julianday('now') - 2440587.5) * 86400.0) AS "db_now [timestamp_real]"
