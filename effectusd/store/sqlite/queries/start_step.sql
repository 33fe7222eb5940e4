-- A step starts when its dispatch is enqueued: its arguments are resolved at that moment.
UPDATE effectus_saga_steps
SET state = 'in_progress', args = :args, args_hash = :args_hash,
    updated_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE saga_id = :saga_id AND effect_id = :effect_id AND state = 'pending'
