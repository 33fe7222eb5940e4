INSERT INTO effectus_saga_events
    (saga_id, effect_id, direction, attempt, kind, from_state, to_state, actor, evidence, detail)
VALUES
    (:saga_id, :effect_id, :direction, :attempt, :kind, :from_state,
     :to_state, :actor, :evidence, :detail)
