-- insert_event for a whole batch (arrays, one element per event). WITH ORDINALITY and the
-- ORDER BY keep event_id in the order the events were produced: the timeline's order.
INSERT INTO effectus_saga_events
    (saga_id, effect_id, direction, attempt, kind, from_state, to_state, actor, evidence, detail)
SELECT saga_id, effect_id, direction, attempt, kind, from_state, to_state, actor, evidence,
       detail::jsonb
FROM unnest(%(saga_id)s::text[], %(effect_id)s::text[], %(direction)s::text[],
            %(attempt)s::int[], %(kind)s::text[], %(from_state)s::text[], %(to_state)s::text[],
            %(actor)s::text[], %(evidence)s::text[], %(detail)s::text[])
     WITH ORDINALITY
     AS e(saga_id, effect_id, direction, attempt, kind, from_state, to_state, actor, evidence,
          detail, n)
ORDER BY n
