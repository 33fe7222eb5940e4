-- The write-ahead: "may have been sent" becomes durable before the call, with the grants.
-- Only rows whose lease is still ours and still live are marked; the rest are not sent.
--
-- The guard (in flight, same attempt, same lease token, lease live) is checked on the outbox
-- row under FOR SHARE, held until this statement's transaction commits. FOR SHARE conflicts
-- with FOR UPDATE and FOR NO KEY UPDATE, so with every writer of the row: the recorder and the
-- reclaim (lock_dispatches.sql, FOR UPDATE), the operator actions (FOR UPDATE, then UPDATE),
-- the claim (FOR UPDATE SKIP LOCKED) and any plain UPDATE. Hence:
-- - a row someone else settles, reclaims or takes over is either locked by them first (we wait
--   for their commit, then re-check the guard on the row as they left it: it fails and
--   nothing is marked) or locked by us first (they wait for our commit, then read sent_at
--   as committed here): the "may have been sent" record is never written for a row someone
--   else has settled;
-- - a row marked here cannot change until the mark commits, so whoever settles it next sees
--   the mark: it is never missed for a row that is sent (only returned rows are called).
-- The old statement took the same conflicts by UPDATEing the outbox row; the lock alone
-- writes no new row version. Rows are locked in dispatch_id order, the recorder's order.
--
-- The outbox row is rewritten only when something on it changes: the grants of a fenced
-- attempt, a fence wait to end. An unfenced step leaves it as the claim wrote it (its grants
-- column stays NULL: a dispatch's grants are shown from its latest sent attempt, see
-- select_saga_dispatches.sql).
WITH marks AS (
    SELECT *
    FROM unnest(%(dispatch_ids)s::bigint[], %(attempts)s::int[], %(lease_tokens)s::uuid[],
                %(grants)s::text[], %(fencing_statuses)s::text[])
         AS m(dispatch_id, attempt, lease_token, grants, fencing_status)
),
owned AS MATERIALIZED (
    SELECT o.dispatch_id, o.attempt, marks.grants::jsonb AS grants, marks.fencing_status,
           (coalesce(o.grants, '[]'::jsonb) <> marks.grants::jsonb
            OR o.fence_wait_since IS NOT NULL) AS changes_row
    FROM effectus_saga_outbox o
    JOIN marks ON o.dispatch_id = marks.dispatch_id
    WHERE o.state = 'in_flight' AND o.attempt = marks.attempt
      AND o.lease_token = marks.lease_token AND o.lease_expires_at > now()
    ORDER BY o.dispatch_id
    FOR SHARE OF o
),
sent AS (
    UPDATE effectus_saga_attempts a
    SET sent_at = clock_timestamp(), grants = owned.grants,
        fencing_status = owned.fencing_status
    FROM owned
    WHERE a.dispatch_id = owned.dispatch_id AND a.attempt = owned.attempt
      AND a.sent_at IS NULL
    RETURNING a.dispatch_id, owned.grants, owned.changes_row
),
rewritten AS (
    UPDATE effectus_saga_outbox o
    SET grants = sent.grants, fence_wait_since = NULL, updated_at = now()
    FROM sent
    WHERE o.dispatch_id = sent.dispatch_id AND sent.changes_row
)
SELECT dispatch_id FROM sent
