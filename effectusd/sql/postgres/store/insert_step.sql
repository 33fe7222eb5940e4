INSERT INTO effectus_saga_steps
    (saga_id, effect_id, sequence, verb, contract_hash, compensation, fencing)
VALUES
    (%(saga_id)s, %(effect_id)s, %(sequence)s, %(verb)s, %(contract_hash)s,
     %(compensation)s::jsonb, %(fencing)s::jsonb)
