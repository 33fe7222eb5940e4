-- A forward dispatch that is not in flight (queued, claimed never or before, or refused by
-- its destination as not committed: blocked_destination) becomes canceled; its row and
-- attempts stay as evidence.
UPDATE effectus_saga_outbox
SET state = 'canceled', updated_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE dispatch_id = :dispatch_id AND state IN ('queued', 'retry_wait', 'blocked_destination')
RETURNING dispatch_id
