-- The same version as PostgreSQL's 10012. A settlement and an enqueue append no timeline
-- event: their entries are read from the attempt and outbox rows (effectusd/core/timeline.py).
-- SQLite adds a column with its own CHECK only, so the entry's wholeness is one column's check.
ALTER TABLE effectus_saga_attempts ADD COLUMN settled_to TEXT CHECK (settled_to IN (
    'succeeded', 'retry_wait', 'failed_permanent', 'blocked_unknown', 'blocked_fence',
    'blocked_contract', 'canceled'));

ALTER TABLE effectus_saga_attempts ADD COLUMN settled_actor TEXT;

ALTER TABLE effectus_saga_attempts ADD COLUMN settled_after INTEGER
    CONSTRAINT effectus_saga_attempts_settled_entry CHECK (
        (settled_to IS NULL) = (settled_actor IS NULL)
        AND (settled_to IS NULL) = (settled_after IS NULL)
        AND (settled_to IS NULL OR outcome IS NOT NULL));

ALTER TABLE effectus_saga_outbox ADD COLUMN enqueued_by TEXT;

CREATE TRIGGER effectus_saga_attempts_settlement_kept
    BEFORE UPDATE OF outcome, settled_by, status_code, error, completed_at, settled_to,
        settled_actor, settled_after
    ON effectus_saga_attempts
    WHEN OLD.settled_to IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'effectus_saga_attempts: a timeline entry is never rewritten');
END;

CREATE TRIGGER effectus_saga_outbox_enqueue_kept
    BEFORE UPDATE OF saga_id, effect_id, direction, idempotency_key, args_hash, created_at,
        enqueued_by
    ON effectus_saga_outbox
    WHEN OLD.enqueued_by IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'effectus_saga_outbox: a timeline entry is never rewritten');
END;

-- SQLite runs ON DELETE CASCADE after the step row is gone, so a delete while the step still
-- exists is a direct one.
CREATE TRIGGER effectus_saga_outbox_no_direct_delete
    BEFORE DELETE ON effectus_saga_outbox
    WHEN EXISTS (SELECT 1 FROM effectus_saga_steps
                 WHERE saga_id = OLD.saga_id AND effect_id = OLD.effect_id)
BEGIN
    SELECT RAISE(ABORT, 'effectus_saga_outbox rows leave only with their step');
END;
