-- A step's life is read from its dispatch rows (effectusd/core/steps.py, docs/design.md
-- section 10): its state from its forward and compensation dispatches' states, the result of
-- its success and its place in the order of successes from its forward dispatch's row, which
-- the settlement that succeeds writes anyway. The step row keeps its pins and the state no
-- dispatch can say (a step that failed at enqueue has none); the engine no longer writes it
-- on the hot path (a chain's step cost two row versions per step).
ALTER TABLE effectus_saga_outbox
    ADD COLUMN result jsonb,
    ADD COLUMN succeeded_order integer CHECK (succeeded_order >= 1),
    -- a forward success's, and only one's
    ADD CONSTRAINT effectus_saga_outbox_result_of_success CHECK (
        (result IS NULL AND succeeded_order IS NULL)
        OR (direction = 'forward' AND state = 'succeeded'));

-- Sagas written before: their steps' results and orders move onto their forward dispatches'
-- rows, so every reader has one place to look. These columns are no timeline entry's (the
-- triggers of 10012 and 10015 name others), and a step's state stays where it is: the
-- readers derive it from the dispatches wherever the step has one, which for every row the
-- engine wrote gives the state it stored.
UPDATE effectus_saga_outbox o
SET result = s.result, succeeded_order = s.succeeded_order
FROM effectus_saga_steps s
WHERE o.saga_id = s.saga_id AND o.effect_id = s.effect_id AND o.direction = 'forward'
  AND o.state = 'succeeded' AND (s.result IS NOT NULL OR s.succeeded_order IS NOT NULL);
