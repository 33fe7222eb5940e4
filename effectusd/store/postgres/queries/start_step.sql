-- A step starts when its dispatch is enqueued: its arguments are resolved at that moment.
UPDATE effectus_saga_steps
SET state = 'in_progress', args = %(args)s::jsonb, args_hash = %(args_hash)s, updated_at = now()
WHERE saga_id = %(saga_id)s AND effect_id = %(effect_id)s AND state = 'pending'
