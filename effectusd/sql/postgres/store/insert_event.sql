INSERT INTO effectus_saga_events
    (saga_id, effect_id, direction, attempt, kind, from_state, to_state, actor, evidence, detail)
VALUES
    (%(saga_id)s, %(effect_id)s, %(direction)s, %(attempt)s, %(kind)s, %(from_state)s,
     %(to_state)s, %(actor)s, %(evidence)s, %(detail)s::jsonb)
