-- The write-ahead: "may have been sent" becomes durable before the call, with the grants.
-- Only rows whose lease is still ours and still live are marked; the rest are not sent.
WITH marks AS (
    SELECT *
    FROM unnest(%(dispatch_ids)s::bigint[], %(attempts)s::int[], %(lease_tokens)s::uuid[],
                %(grants)s::text[], %(fencing_statuses)s::text[])
         AS m(dispatch_id, attempt, lease_token, grants, fencing_status)
),
owned AS (
    UPDATE effectus_saga_outbox o
    SET grants = marks.grants::jsonb, fence_wait_since = NULL, updated_at = now()
    FROM marks
    WHERE o.dispatch_id = marks.dispatch_id AND o.state = 'in_flight'
      AND o.attempt = marks.attempt AND o.lease_token = marks.lease_token
      AND o.lease_expires_at > now()
    RETURNING o.dispatch_id, o.attempt
)
UPDATE effectus_saga_attempts a
SET sent_at = clock_timestamp(), grants = marks.grants::jsonb,
    fencing_status = marks.fencing_status
FROM marks
JOIN owned ON owned.dispatch_id = marks.dispatch_id AND owned.attempt = marks.attempt
WHERE a.dispatch_id = marks.dispatch_id AND a.attempt = marks.attempt AND a.sent_at IS NULL
RETURNING a.dispatch_id
