-- A claim appends no timeline event: its entry (dispatch_claimed) is read from the attempt row
-- it opens (effectusd/core/timeline.py). What the claim wrote there is kept as the events table
-- keeps its rows: never rewritten (not even to the same value), and the row leaves only with its
-- dispatch, that is with its saga (prune). The settlement, write-ahead and late-answer columns
-- stay writable. AFTER triggers, not BEFORE: a BEFORE row trigger locks the old row first, one
-- more WAL record on every update of the table (the write-ahead's, the settlement's), even one
-- that names none of the claim's columns; an AFTER UPDATE OF trigger costs only the statements
-- that name them, and aborts them all the same.
CREATE FUNCTION effectus_saga_attempts_claim_kept() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'effectus_saga_attempts: a claim is never rewritten (attempt % of dispatch %)',
        OLD.attempt, OLD.dispatch_id;
END;
$$;

CREATE TRIGGER effectus_saga_attempts_claim_kept
    AFTER UPDATE OF dispatch_id, attempt, request_id, lease_owner, lease_token, claimed_at,
        lease_expires_at
    ON effectus_saga_attempts
    FOR EACH ROW EXECUTE FUNCTION effectus_saga_attempts_claim_kept();

-- ON DELETE CASCADE runs inside the referential-integrity trigger: an attempt deleted with its
-- dispatch (itself deleted with its saga) is one or more trigger levels deeper than a direct
-- DELETE. A BEFORE trigger here (rows are deleted only by prune, so its row lock costs only
-- prune): the cascade's AFTER row triggers would run at the end of the outer statement, level 1.
CREATE FUNCTION effectus_saga_attempts_no_direct_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF pg_trigger_depth() < 2 THEN
        RAISE EXCEPTION 'effectus_saga_attempts rows leave only with their dispatch';
    END IF;
    RETURN OLD;
END;
$$;

CREATE TRIGGER effectus_saga_attempts_no_direct_delete
    BEFORE DELETE ON effectus_saga_attempts
    FOR EACH ROW EXECUTE FUNCTION effectus_saga_attempts_no_direct_delete();
