-- insert_event for a whole batch (a JSON array of rows, one object per event). WITH
-- ORDINALITY and the ORDER BY keep event_id in the order the events were produced: the
-- timeline's order.
INSERT INTO effectus_saga_events
    (saga_id, effect_id, direction, attempt, kind, from_state, to_state, actor, evidence, detail)
SELECT saga_id, effect_id, direction, attempt, kind, from_state, to_state, actor, evidence,
       detail::jsonb
FROM ROWS FROM (json_to_recordset(%(rows)s::json) AS (
        saga_id text, effect_id text, direction text, attempt int, kind text,
        from_state text, to_state text, actor text, evidence text, detail text
     )) WITH ORDINALITY
     AS e(saga_id, effect_id, direction, attempt, kind, from_state, to_state, actor, evidence,
          detail, n)
ORDER BY n
