-- The soak's progress: dispatches that succeeded so far.
SELECT count(*) FROM effectus_saga_outbox WHERE state = 'succeeded'
