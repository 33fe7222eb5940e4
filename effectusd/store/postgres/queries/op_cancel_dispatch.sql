-- A claimed-before dispatch that is not in flight now (retry_wait) becomes canceled.
UPDATE effectus_saga_outbox
SET state = 'canceled', updated_at = now()
WHERE dispatch_id = %(dispatch_id)s AND state IN ('queued', 'retry_wait') AND attempt >= 1
RETURNING dispatch_id
