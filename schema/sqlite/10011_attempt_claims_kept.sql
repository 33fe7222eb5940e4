-- The same version as PostgreSQL's 10011. A claim appends no timeline event: its entry
-- (dispatch_claimed) is read from the attempt row it opens (effectusd/core/timeline.py). What
-- the claim wrote there is never rewritten, and the row leaves only with its dispatch (SQLite
-- runs ON DELETE CASCADE after the dispatch row is gone, so a delete while the dispatch still
-- exists is a direct one).
CREATE TRIGGER effectus_saga_attempts_claim_kept
    BEFORE UPDATE OF dispatch_id, attempt, request_id, lease_owner, lease_token, claimed_at,
        lease_expires_at
    ON effectus_saga_attempts
BEGIN
    SELECT RAISE(ABORT, 'effectus_saga_attempts: the claim of an attempt is never rewritten');
END;

CREATE TRIGGER effectus_saga_attempts_no_direct_delete
    BEFORE DELETE ON effectus_saga_attempts
    WHEN EXISTS (SELECT 1 FROM effectus_saga_outbox WHERE dispatch_id = OLD.dispatch_id)
BEGIN
    SELECT RAISE(ABORT, 'effectus_saga_attempts rows leave only with their dispatch');
END;
