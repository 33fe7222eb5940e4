-- The same version as PostgreSQL's 10020: a saga's completion is read from the attempt row of
-- the settlement that completes it (settled_saga) instead of a stored event
-- (effectusd/core/timeline.py). SQLite adds a column with its own CHECK only.
ALTER TABLE effectus_saga_attempts ADD COLUMN settled_saga TEXT
    CONSTRAINT effectus_saga_attempts_saga_entry CHECK (
        settled_saga IS NULL OR (settled_saga = 'completed' AND settled_step IS NOT NULL));

DROP TRIGGER effectus_saga_attempts_settlement_kept;
CREATE TRIGGER effectus_saga_attempts_settlement_kept
    BEFORE UPDATE OF outcome, settled_by, status_code, error, completed_at, settled_to,
        settled_actor, settled_after, settled_step, settled_saga
    ON effectus_saga_attempts
    WHEN OLD.settled_to IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'effectus_saga_attempts: a timeline entry is never rewritten');
END;
