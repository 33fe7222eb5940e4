-- Each dispatch's state and current lease token (see PostgreSQL's).
SELECT dispatch_id, state, lease_token
FROM effectus_saga_outbox
WHERE dispatch_id IN (SELECT value FROM json_each(:dispatch_ids))
