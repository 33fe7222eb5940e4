-- The write-ahead found a fencing resource of these attempts held by another live dispatch:
-- nothing is sent. Count each as a fence wait (not an attempt of the retry budget) and start
-- the wait's clock at the first busy round; waited_s is how long this wait has lasted, started
-- whether this round began it (the engine stores the wait's start on the timeline). The three
-- parameters are parallel JSON arrays.
UPDATE effectus_saga_outbox
SET fence_waits = fence_waits + 1,
    fence_wait_since = coalesce(fence_wait_since, ((julianday('now') - 2440587.5) * 86400.0)),
    updated_at = ((julianday('now') - 2440587.5) * 86400.0)
FROM (
    SELECT d.value AS dispatch_id, a.value AS attempt, t.value AS lease_token
    FROM json_each(:dispatch_ids) AS d
    JOIN json_each(:attempts) AS a ON a.key = d.key
    JOIN json_each(:lease_tokens) AS t ON t.key = d.key
) AS w
WHERE effectus_saga_outbox.dispatch_id = w.dispatch_id
  AND effectus_saga_outbox.state = 'in_flight'
  AND effectus_saga_outbox.attempt = w.attempt
  AND effectus_saga_outbox.lease_token = w.lease_token
RETURNING dispatch_id,
          ((julianday('now') - 2440587.5) * 86400.0) - fence_wait_since AS waited_s,
          fence_wait_since = ((julianday('now') - 2440587.5) * 86400.0) AS "started [boolean]"
