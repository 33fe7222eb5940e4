-- A chain's two step moves append no timeline event either (effectusd/core/timeline.py): the
-- move of the step a settlement completes is read from that attempt row, and the start of the
-- step the same transaction enqueues from the new outbox row, as 10012's settlement and
-- enqueue entries are. What those rows lacked is added here, NULL on rows whose moves were
-- stored as events (every row written before this version, and every move the rows cannot
-- place as it was):
--
-- * on the attempt row: settled_step, the state the settled success moved its step to
--   (forward: succeeded, from in_progress; compensation: compensated, from compensating);
-- * on the outbox row: started_from, the state its step's start moved it from (the step then
--   in_progress, or compensating), and enqueued_after, the entry id of the settlement whose
--   transaction enqueued it (effectusd.core.timeline.derived_event_id), which both entries
--   follow.
ALTER TABLE effectus_saga_attempts
    ADD COLUMN settled_step text CHECK (settled_step IN ('succeeded', 'compensated'));

ALTER TABLE effectus_saga_outbox
    ADD COLUMN started_from text,
    ADD COLUMN enqueued_after bigint,
    ADD CONSTRAINT effectus_saga_outbox_started_entry CHECK (
        (started_from IS NULL) = (enqueued_after IS NULL)
        AND (started_from IS NULL OR enqueued_by IS NOT NULL));

-- Kept as the other entries are: never rewritten once they are entries (10012's triggers,
-- made again with the new columns named).
DROP TRIGGER effectus_saga_attempts_settlement_kept ON effectus_saga_attempts;
CREATE TRIGGER effectus_saga_attempts_settlement_kept
    AFTER UPDATE OF outcome, settled_by, status_code, error, completed_at, settled_to,
        settled_actor, settled_after, settled_step
    ON effectus_saga_attempts
    FOR EACH ROW WHEN (OLD.settled_to IS NOT NULL)
    EXECUTE FUNCTION effectus_timeline_entry_kept();

DROP TRIGGER effectus_saga_outbox_enqueue_kept ON effectus_saga_outbox;
CREATE TRIGGER effectus_saga_outbox_enqueue_kept
    AFTER UPDATE OF saga_id, effect_id, direction, idempotency_key, args_hash, created_at,
        enqueued_by, started_from, enqueued_after
    ON effectus_saga_outbox
    FOR EACH ROW WHEN (OLD.enqueued_by IS NOT NULL)
    EXECUTE FUNCTION effectus_timeline_entry_kept();
