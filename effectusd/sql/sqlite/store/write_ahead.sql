-- The write-ahead: "may have been sent" becomes durable before the call, with the grants.
-- Only attempts whose dispatch lease is still ours and still live are marked; the rest are not
-- sent. The five parameters are parallel JSON arrays (grants: JSON texts). The trigger
-- effectus_saga_attempts_sent also writes the grants on the dispatch row and ends its fence
-- wait, for each attempt marked here (a SQLite statement changes one table). PostgreSQL
-- rewrites the dispatch row only when it changes; both stores show a dispatch's grants from
-- its latest sent attempt (select_saga_dispatches.sql). A SQLite writer holds the database
-- lock (BEGIN IMMEDIATE or one statement), so the guard here cannot be raced.
WITH marks AS (
    SELECT d.value AS dispatch_id, a.value AS attempt, t.value AS lease_token,
           g.value AS grants, f.value AS fencing_status
    FROM json_each(:dispatch_ids) AS d
    JOIN json_each(:attempts) AS a ON a.key = d.key
    JOIN json_each(:lease_tokens) AS t ON t.key = d.key
    JOIN json_each(:grants) AS g ON g.key = d.key
    JOIN json_each(:fencing_statuses) AS f ON f.key = d.key
)
UPDATE effectus_saga_attempts
SET sent_at = ((julianday('now') - 2440587.5) * 86400.0),
    grants = marks.grants,
    fencing_status = marks.fencing_status
FROM marks
JOIN effectus_saga_outbox o ON o.dispatch_id = marks.dispatch_id
WHERE effectus_saga_attempts.dispatch_id = marks.dispatch_id
  AND effectus_saga_attempts.attempt = marks.attempt
  AND effectus_saga_attempts.sent_at IS NULL
  AND o.state = 'in_flight' AND o.attempt = marks.attempt
  AND o.lease_token = marks.lease_token
  AND o.lease_expires_at > ((julianday('now') - 2440587.5) * 86400.0)
RETURNING dispatch_id
