-- insert_step for a whole batch (arrays, one element per step).
INSERT INTO effectus_saga_steps
    (saga_id, effect_id, sequence, verb, contract_hash, compensation, fencing)
SELECT saga_id, effect_id, sequence, verb, contract_hash, compensation::jsonb, fencing::jsonb
FROM unnest(%(saga_id)s::text[], %(effect_id)s::text[], %(sequence)s::int[], %(verb)s::text[],
            %(contract_hash)s::text[], %(compensation)s::text[], %(fencing)s::text[])
     AS s(saga_id, effect_id, sequence, verb, contract_hash, compensation, fencing)
