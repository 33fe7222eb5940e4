-- The engine cancels a parallel step's sibling that was not sent (docs/design.md section 4):
-- queued, or retry_wait with no attempt that may have committed. Locked by lock_dispatches,
-- so every named row still qualifies; the caller checks the count.
UPDATE effectus_saga_outbox
SET state = 'canceled', updated_at = now()
WHERE saga_id = %(saga_id)s AND effect_id = ANY(%(effect_ids)s::text[])
  AND direction = 'forward' AND state IN ('queued', 'retry_wait')
  AND uncertain_attempt IS NULL
RETURNING dispatch_id
