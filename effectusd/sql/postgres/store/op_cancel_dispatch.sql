-- A forward dispatch that is not in flight (queued, claimed never or before, or refused by
-- its destination as not committed: blocked_destination) becomes canceled; its row and
-- attempts stay as evidence.
UPDATE effectus_saga_outbox
SET state = 'canceled', updated_at = now()
WHERE dispatch_id = %(dispatch_id)s AND state IN ('queued', 'retry_wait', 'blocked_destination')
RETURNING dispatch_id
