-- For each reported (dispatch, attempt): how that attempt was settled, and whether a later
-- attempt of the same dispatch was already sent. dispatch_ids and attempts are parallel JSON
-- arrays. Its lease token says whether the row is the reported attempt's own.
SELECT r.value AS dispatch_id, ra.value AS attempt, a.settled_by,
       a.sent_at IS NOT NULL AS "sent [boolean]", a.lease_token,
       EXISTS (
           SELECT 1 FROM effectus_saga_attempts later
           WHERE later.dispatch_id = r.value AND later.attempt > ra.value
             AND later.sent_at IS NOT NULL
       ) AS "later_sent [boolean]"
FROM json_each(:dispatch_ids) AS r
JOIN json_each(:attempts) AS ra ON ra.key = r.key
JOIN effectus_saga_attempts a ON a.dispatch_id = r.value AND a.attempt = ra.value
