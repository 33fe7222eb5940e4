-- set_result is a boolean (0/1): only then is result written (it may be written as NULL).
UPDATE effectus_saga_steps
SET state = :state,
    result = CASE WHEN :set_result THEN :result ELSE result END,
    args = coalesce(:args, args),
    args_hash = coalesce(:args_hash, args_hash),
    succeeded_order = coalesce(:succeeded_order, succeeded_order),
    updated_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE saga_id = :saga_id AND effect_id = :effect_id
