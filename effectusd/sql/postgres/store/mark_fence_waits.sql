-- The write-ahead found a fencing resource of these attempts held by another live dispatch:
-- nothing is sent. Count each as a fence wait (not an attempt of the retry budget) and start
-- the wait's clock at the first busy round; waited_s is how long this wait has lasted, started
-- whether this round began it (the engine stores the wait's start on the timeline).
UPDATE effectus_saga_outbox o
SET fence_waits = o.fence_waits + 1,
    fence_wait_since = coalesce(o.fence_wait_since, now()),
    updated_at = now()
FROM unnest(%(dispatch_ids)s::bigint[], %(attempts)s::int[], %(lease_tokens)s::uuid[])
     AS w(dispatch_id, attempt, lease_token)
WHERE o.dispatch_id = w.dispatch_id AND o.state = 'in_flight'
  AND o.attempt = w.attempt AND o.lease_token = w.lease_token
RETURNING o.dispatch_id, extract(epoch FROM now() - o.fence_wait_since)::float8 AS waited_s,
          o.fence_wait_since = now() AS started
