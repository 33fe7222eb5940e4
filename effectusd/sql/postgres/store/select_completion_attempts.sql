-- For each reported (dispatch, attempt): how that attempt was settled, and whether a later
-- attempt of the same dispatch was already sent; its lease token says whether the row is the
-- reported attempt's own (a failover that lost the claim may number a new attempt the same).
SELECT r.dispatch_id, r.attempt, a.settled_by, a.sent_at IS NOT NULL AS sent,
       a.lease_token::text AS lease_token,
       EXISTS (
           SELECT 1 FROM effectus_saga_attempts later
           WHERE later.dispatch_id = r.dispatch_id AND later.attempt > r.attempt
             AND later.sent_at IS NOT NULL
       ) AS later_sent
FROM unnest(%(dispatch_ids)s::bigint[], %(attempts)s::int[]) AS r(dispatch_id, attempt)
JOIN effectus_saga_attempts a ON a.dispatch_id = r.dispatch_id AND a.attempt = r.attempt
