-- insert_step for a whole batch (a JSON array of rows, one object per step).
INSERT INTO effectus_saga_steps
    (saga_id, effect_id, sequence, verb, contract_hash, compensation, fencing)
SELECT saga_id, effect_id, sequence, verb, contract_hash, compensation::jsonb, fencing::jsonb
FROM jsonb_to_recordset(%(rows)s::jsonb) AS s(
        saga_id text, effect_id text, sequence int, verb text, contract_hash text,
        compensation text, fencing text
     )
