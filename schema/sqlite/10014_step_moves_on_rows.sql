-- The same version as PostgreSQL's 10014: a chain's two step moves are read from the attempt
-- row (settled_step) and the outbox row (started_from, enqueued_after) instead of stored
-- events (effectusd/core/timeline.py). SQLite adds a column with its own CHECK only.
ALTER TABLE effectus_saga_attempts ADD COLUMN settled_step TEXT
    CHECK (settled_step IN ('succeeded', 'compensated'));

ALTER TABLE effectus_saga_outbox ADD COLUMN started_from TEXT;

ALTER TABLE effectus_saga_outbox ADD COLUMN enqueued_after INTEGER
    CONSTRAINT effectus_saga_outbox_started_entry CHECK (
        (started_from IS NULL) = (enqueued_after IS NULL)
        AND (started_from IS NULL OR enqueued_by IS NOT NULL));

DROP TRIGGER effectus_saga_attempts_settlement_kept;
CREATE TRIGGER effectus_saga_attempts_settlement_kept
    BEFORE UPDATE OF outcome, settled_by, status_code, error, completed_at, settled_to,
        settled_actor, settled_after, settled_step
    ON effectus_saga_attempts
    WHEN OLD.settled_to IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'effectus_saga_attempts: a timeline entry is never rewritten');
END;

DROP TRIGGER effectus_saga_outbox_enqueue_kept;
CREATE TRIGGER effectus_saga_outbox_enqueue_kept
    BEFORE UPDATE OF saga_id, effect_id, direction, idempotency_key, args_hash, created_at,
        enqueued_by, started_from, enqueued_after
    ON effectus_saga_outbox
    WHEN OLD.enqueued_by IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'effectus_saga_outbox: a timeline entry is never rewritten');
END;
