SELECT event_id, effect_id, direction, attempt, kind, from_state, to_state, actor, evidence,
       detail, at
FROM effectus_saga_events WHERE saga_id = :saga_id ORDER BY event_id
