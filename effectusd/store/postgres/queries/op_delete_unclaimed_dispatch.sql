-- A dispatch never claimed (queued, attempt 0) has no attempts and was never sent. The schema
-- admits attempt 0 only in state queued, so a cancel removes the row; the timeline keeps it.
DELETE FROM effectus_saga_outbox
WHERE dispatch_id = %(dispatch_id)s AND state = 'queued' AND attempt = 0
RETURNING dispatch_id
