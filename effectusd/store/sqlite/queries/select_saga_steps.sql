SELECT effect_id, sequence, verb, contract_hash, args, args_hash, compensation, fencing, state,
       result, succeeded_order, updated_at
FROM effectus_saga_steps WHERE saga_id = :saga_id ORDER BY sequence
