-- Waiting for a fencing resource held by another live dispatch sends nothing, so it is not an
-- attempt of the retry budget (DESIGN section 6, issue 13). fence_waits counts the attempts
-- whose write-ahead found a resource busy (the engine subtracts them from the budget);
-- fence_wait_since is when the current wait began (its own bound, fencing.wait_limit), cleared
-- when a write-ahead goes through or an operator sends the dispatch again. (SQLite cannot add a
-- CHECK that names another column; the write-ahead is the only writer of fence_waits.)
ALTER TABLE effectus_saga_outbox
    ADD COLUMN fence_waits INTEGER NOT NULL DEFAULT 0 CHECK (fence_waits >= 0);
ALTER TABLE effectus_saga_outbox ADD COLUMN fence_wait_since TIMESTAMP_REAL;

-- The write-ahead also ends a fence wait (PostgreSQL: in write_ahead.sql itself).
DROP TRIGGER effectus_saga_attempts_sent;
CREATE TRIGGER effectus_saga_attempts_sent
    AFTER UPDATE OF sent_at ON effectus_saga_attempts
    WHEN OLD.sent_at IS NULL AND NEW.sent_at IS NOT NULL
BEGIN
    UPDATE effectus_saga_outbox
    SET grants = NEW.grants, fence_wait_since = NULL,
        updated_at = ((julianday('now') - 2440587.5) * 86400.0)
    WHERE dispatch_id = NEW.dispatch_id AND attempt = NEW.attempt;
END;
