-- The engine cancels a parallel step's sibling that was not sent (docs/design.md section 4):
-- queued, or retry_wait with no attempt that may have committed. The write lock is held since
-- the facts were read, so every named row still qualifies; the caller checks the count.
UPDATE effectus_saga_outbox
SET state = 'canceled', updated_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE saga_id = :saga_id AND effect_id IN (SELECT value FROM json_each(:effect_ids))
  AND direction = 'forward' AND state IN ('queued', 'retry_wait')
  AND uncertain_attempt IS NULL
RETURNING dispatch_id
