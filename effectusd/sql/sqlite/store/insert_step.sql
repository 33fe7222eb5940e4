INSERT INTO effectus_saga_steps
    (saga_id, effect_id, sequence, verb, contract_hash, compensation, fencing)
VALUES
    (:saga_id, :effect_id, :sequence, :verb, :contract_hash,
     :compensation, :fencing)
