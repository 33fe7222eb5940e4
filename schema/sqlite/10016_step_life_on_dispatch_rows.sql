-- A step's life is read from its dispatch rows (effectusd/core/steps.py, docs/design.md
-- section 10): its state from its forward and compensation dispatches' states, the result of
-- its success and its place in the order of successes from its forward dispatch's row, which
-- the settlement that succeeds writes anyway. The step row keeps its pins and the state no
-- dispatch can say (a step that failed at enqueue has none); the engine no longer writes it
-- on the hot path.
ALTER TABLE effectus_saga_outbox
    ADD COLUMN result JSON_TEXT CHECK (result IS NULL OR json_valid(result));
ALTER TABLE effectus_saga_outbox
    ADD COLUMN succeeded_order INTEGER CHECK (succeeded_order >= 1);

-- Sagas written before: their steps' results and orders move onto their forward dispatches'
-- rows, so every reader has one place to look (no timeline entry is read from these columns;
-- a step's state stays where it is, and is read from the dispatches wherever it has one).
UPDATE effectus_saga_outbox
SET result = (SELECT s.result FROM effectus_saga_steps s
              WHERE s.saga_id = effectus_saga_outbox.saga_id
                AND s.effect_id = effectus_saga_outbox.effect_id),
    succeeded_order = (SELECT s.succeeded_order FROM effectus_saga_steps s
                       WHERE s.saga_id = effectus_saga_outbox.saga_id
                         AND s.effect_id = effectus_saga_outbox.effect_id)
WHERE direction = 'forward' AND state = 'succeeded';
