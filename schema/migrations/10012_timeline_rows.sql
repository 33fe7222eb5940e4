-- A settlement and an enqueue append no timeline event either: their entries (attempt_settled,
-- dispatch_enqueued) are read from the rows they write anyway (effectusd/core/timeline.py),
-- as a claim's is since 10011. What those rows lacked is added here:
--
-- * on the attempt row, written by the statement that settles it: the state the settlement
--   moved its dispatch to (settled_to), who settled it (settled_actor: the engine, a daemon's
--   reclaim) and where the entry goes among the stored events: after the saga's last stored
--   event when it settled (settled_after), before every later one. Set only when the entry is
--   the row's (a row settled by an earlier version has its stored event, and NULL here);
-- * on the outbox row: who enqueued it (enqueued_by: the client at submit, the engine, an
--   operator). Set only when the entry is the row's, likewise.
ALTER TABLE effectus_saga_attempts
    ADD COLUMN settled_to text CHECK (settled_to IN (
        'succeeded', 'retry_wait', 'failed_permanent', 'blocked_unknown', 'blocked_fence',
        'blocked_contract', 'canceled')),
    ADD COLUMN settled_actor text,
    ADD COLUMN settled_after bigint,
    -- the entry is whole, and only on a settled attempt
    ADD CONSTRAINT effectus_saga_attempts_settled_entry CHECK (
        (settled_to IS NULL) = (settled_actor IS NULL)
        AND (settled_to IS NULL) = (settled_after IS NULL)
        AND (settled_to IS NULL OR outcome IS NOT NULL));

ALTER TABLE effectus_saga_outbox ADD COLUMN enqueued_by text;

-- Those entries are kept as the events table keeps its rows: what they are read from is never
-- rewritten once it is an entry (AFTER UPDATE OF triggers: they cost only the statements that
-- name these columns, and the settlement's own write finds settled_to still NULL), and an
-- outbox row leaves only with its step, that is with its saga (prune), as 10011's attempt rows
-- leave only with their dispatch.
CREATE FUNCTION effectus_timeline_entry_kept() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%: a timeline entry is never rewritten (dispatch %)',
        TG_TABLE_NAME, OLD.dispatch_id;
END;
$$;

CREATE TRIGGER effectus_saga_attempts_settlement_kept
    AFTER UPDATE OF outcome, settled_by, status_code, error, completed_at, settled_to,
        settled_actor, settled_after
    ON effectus_saga_attempts
    FOR EACH ROW WHEN (OLD.settled_to IS NOT NULL)
    EXECUTE FUNCTION effectus_timeline_entry_kept();

CREATE TRIGGER effectus_saga_outbox_enqueue_kept
    AFTER UPDATE OF saga_id, effect_id, direction, idempotency_key, args_hash, created_at,
        enqueued_by
    ON effectus_saga_outbox
    FOR EACH ROW WHEN (OLD.enqueued_by IS NOT NULL)
    EXECUTE FUNCTION effectus_timeline_entry_kept();

-- Deleted with its step (ON DELETE CASCADE, inside the referential-integrity trigger) is one
-- or more trigger levels deeper than a direct DELETE (see 10011).
CREATE FUNCTION effectus_saga_outbox_no_direct_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF pg_trigger_depth() < 2 THEN
        RAISE EXCEPTION 'effectus_saga_outbox rows leave only with their step';
    END IF;
    RETURN OLD;
END;
$$;

CREATE TRIGGER effectus_saga_outbox_no_direct_delete
    BEFORE DELETE ON effectus_saga_outbox
    FOR EACH ROW EXECUTE FUNCTION effectus_saga_outbox_no_direct_delete();
