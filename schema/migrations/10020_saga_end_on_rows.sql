-- A saga's completion appends no timeline event either (effectusd/core/timeline.py): the
-- settlement whose success completes it carries the move on its attempt row, after the step
-- move it already carries (10015), as long as nothing else is said of it (running to
-- completed, by the settlement's actor, with no reason). settled_saga is the saga's state
-- after: NULL on every row written before this version, and where the completion was stored
-- as an event (an operator's resolution, a second settlement in one batch, anything the row
-- cannot give back the same). A five-step saga that completes stores one event where it
-- stored two.
ALTER TABLE effectus_saga_attempts
    ADD COLUMN settled_saga text CHECK (settled_saga = 'completed'),
    ADD CONSTRAINT effectus_saga_attempts_saga_entry CHECK (
        settled_saga IS NULL OR settled_step IS NOT NULL);

-- Kept as the other entries are: never rewritten once they are entries (10015's trigger,
-- made again with the new column named).
DROP TRIGGER effectus_saga_attempts_settlement_kept ON effectus_saga_attempts;
CREATE TRIGGER effectus_saga_attempts_settlement_kept
    AFTER UPDATE OF outcome, settled_by, status_code, error, completed_at, settled_to,
        settled_actor, settled_after, settled_step, settled_saga
    ON effectus_saga_attempts
    FOR EACH ROW WHEN (OLD.settled_to IS NOT NULL)
    EXECUTE FUNCTION effectus_timeline_entry_kept();
